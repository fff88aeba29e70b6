#!/usr/bin/env bash
# Builds the Go client library and example offline, with Debian's Go packages:
#   apt-get install golang-go protobuf-compiler protoc-gen-go protoc-gen-go-grpc \
#     golang-google-grpc-dev golang-github-golang-protobuf-1-5-dev
# Generates the stubs of queue.proto and admin.proto from ../../proto into
# redq/v1 (import path redq/v1, not committed), links gopath/src/redq to the
# library in redq/ (import path redq), and builds bin/redq-example, in GOPATH
# mode (GO111MODULE=off).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

hint="apt-get install golang-go protobuf-compiler protoc-gen-go protoc-gen-go-grpc golang-google-grpc-dev golang-github-golang-protobuf-1-5-dev"
for tool in go protoc protoc-gen-go protoc-gen-go-grpc; do
  command -v "$tool" >/dev/null || { echo "FAIL: go client: $tool not found: $hint" >&2; exit 1; }
done
# genproto (from golang-google-grpc-dev) holds google.rpc.Status, which
# queue.proto imports: its Go package is used as is, never generated here.
for pkg in google.golang.org/grpc google.golang.org/protobuf google.golang.org/genproto/googleapis/rpc/status; do
  [ -d "/usr/share/gocode/src/$pkg" ] || { echo "FAIL: go client: /usr/share/gocode/src/$pkg missing: $hint" >&2; exit 1; }
done

# The redq protos have no go_package option: map them to the import path
# redq/v1 (package redqv1) here; status.proto maps to the genproto package.
map="Mredq/v1/queue.proto=redq/v1;redqv1,Mredq/v1/admin.proto=redq/v1;redqv1"
map="$map,Mgoogle/rpc/status.proto=google.golang.org/genproto/googleapis/rpc/status"
rm -rf redq/v1 gen
mkdir -p gen bin gopath/src
protoc -I ../../proto \
  --go_out=gen --go_opt="$map" \
  --go-grpc_out=gen --go-grpc_opt="$map" \
  ../../proto/redq/v1/queue.proto ../../proto/redq/v1/admin.proto
mv gen/redq/v1 redq/v1
rm -rf gen
# GOPATH mode finds packages under $GOPATH/src only: link the library there.
rm -rf gopath/src/redq  # a link (or the directory of an older build.sh)
ln -s ../../redq gopath/src/redq

export GO111MODULE=off GOPROXY=off GOFLAGS=
export GOPATH="$PWD/gopath:/usr/share/gocode"
# Go's build cache lives under $HOME; without one (some CI shells) keep it here.
if [ -z "${GOCACHE:-}" ] && [ -z "${HOME:-}" ] && [ -z "${XDG_CACHE_HOME:-}" ]; then
  export GOCACHE="$PWD/gopath/cache"
fi
go vet redq redq/v1 .
go build -o bin/redq-example .
echo "built clients/go/bin/redq-example"
