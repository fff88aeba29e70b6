#!/usr/bin/env bash
# Builds the Go example client offline, with Debian's Go packages:
#   apt-get install golang-go protobuf-compiler protoc-gen-go protoc-gen-go-grpc \
#     golang-google-grpc-dev golang-github-golang-protobuf-1-5-dev
# Generates the stubs from ../../proto into gopath/src/redq/v1 (not committed)
# and builds bin/redq-example, in GOPATH mode (GO111MODULE=off).
set -euo pipefail
cd "$(dirname "$0")"

hint="apt-get install golang-go protobuf-compiler protoc-gen-go protoc-gen-go-grpc golang-google-grpc-dev golang-github-golang-protobuf-1-5-dev"
for tool in go protoc protoc-gen-go protoc-gen-go-grpc; do
  command -v "$tool" >/dev/null || { echo "FAIL: go client: $tool not found: $hint" >&2; exit 1; }
done
for pkg in google.golang.org/grpc google.golang.org/protobuf; do
  [ -d "/usr/share/gocode/src/$pkg" ] || { echo "FAIL: go client: /usr/share/gocode/src/$pkg missing: $hint" >&2; exit 1; }
done

# queue.proto has no go_package option: map it to the import path redq/v1
# (package redqv1) here instead.
map="Mredq/v1/queue.proto=redq/v1;redqv1"
rm -rf gopath/src/redq
mkdir -p gopath/src bin
protoc -I ../../proto \
  --go_out=gopath/src --go_opt="$map" \
  --go-grpc_out=gopath/src --go-grpc_opt="$map" \
  ../../proto/redq/v1/queue.proto

export GO111MODULE=off GOPROXY=off GOFLAGS=
export GOPATH="$PWD/gopath:/usr/share/gocode"
# Go's build cache lives under $HOME; without one (some CI shells) keep it here.
if [ -z "${GOCACHE:-}" ] && [ -z "${HOME:-}" ] && [ -z "${XDG_CACHE_HOME:-}" ]; then
  export GOCACHE="$PWD/gopath/cache"
fi
go build -o bin/redq-example .
echo "built clients/go/bin/redq-example"
