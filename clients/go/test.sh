#!/usr/bin/env bash
# CI's entry point for the Go client, against the live redq at $REDQ_ADDR
# (host:port, required). Offline, in module mode, on Debian's Go packages
# (offline.sh says how). Exits non-zero when any step fails:
#   1. the committed stubs (redq/v1) match a fresh generation from ../../proto;
#   2. go vet ./... and the example (build.sh);
#   3. the library's tests (go test, -race where cgo works);
#   4. from the artifact: a project in a folder outside the repository gets
#      the module by its path (go get, through a replace to the files the
#      repository ships, as with a local checkout), builds the example and a
#      small program (testdata/consumer) on it, and that program publishes
#      and receives one message.
set -euo pipefail
cd "$(dirname "$0")"
: "${REDQ_ADDR:?set REDQ_ADDR to a running redq (host:port)}"
export REDQ_ADDR
module=$(sed -n 's/^module //p' go.mod)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "go client: 1. stubs match the proto"
./generate.sh "$work/stubs"
# The header lines naming protoc's and the plugins' versions are left out:
# another protoc release makes the same code.
if ! diff -r -u -I '^//.*protoc.* \(v[0-9]\|(unknown)\)' "$work/stubs" redq/v1; then
  echo "FAIL: go client: redq/v1 differs from the proto: run clients/go/generate.sh and commit redq/v1" >&2
  exit 1
fi

echo "go client: 2. go vet and the example"
./build.sh
source ./offline.sh
offline_setup

echo "go client: 3. go test"
# The race detector needs cgo; use it where there is a C compiler.
race=()
if [ "$(go env CGO_ENABLED)" = 1 ] && command -v "$(go env CC)" >/dev/null; then
  race=(-race)
fi
# -count=1: always against the server, never a cached pass.
go test "${offline_flags[@]}" "${race[@]}" -count=1 -timeout 60s -v ./...

echo "go client: 4. a project outside the repository on the module"
# The module as the repository ships it: the files git tracks or would add
# (ignored ones left out), so a file the repository lacks fails here.
mkdir "$work/module"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard . |
    while IFS= read -r -d '' f; do
      [ -f "$f" ] && install -D -m 644 "$f" "$work/module/$f"
    done
else
  cp -R go.mod cmd redq "$work/module/"
fi
mkdir "$work/consumer"
cp testdata/consumer/main.go "$work/consumer/"
cd "$work/consumer"
{
  printf 'module example.com/redq-consumer\n\ngo 1.19\n\n'
  printf 'replace %s => %s\n' "$module" "$work/module"
  printf '%s' "$offline_replaces"
} >go.mod
go get "$module/redq"
go vet .
go build -o consumer .
go build -o redq-example "$module/cmd/redq-example"
./consumer
