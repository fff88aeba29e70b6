#!/usr/bin/env bash
# Builds the Go client (build.sh) and runs the library's tests (go test, in
# GOPATH mode) against the live redq at $REDQ_ADDR (host:port, required).
# Exits non-zero when the build or any test fails.
set -euo pipefail
cd "$(dirname "$0")"
: "${REDQ_ADDR:?set REDQ_ADDR to a running redq (host:port)}"
export REDQ_ADDR

./build.sh
export GO111MODULE=off GOPROXY=off GOFLAGS=
export GOPATH="$PWD/gopath:/usr/share/gocode"
if [ -z "${GOCACHE:-}" ] && [ -z "${HOME:-}" ] && [ -z "${XDG_CACHE_HOME:-}" ]; then
  export GOCACHE="$PWD/gopath/cache"
fi
# The race detector needs cgo; use it where there is a C compiler.
race=()
if [ "$(go env CGO_ENABLED)" = 1 ] && command -v "$(go env CC)" >/dev/null; then
  race=(-race)
fi
# -count=1: always against the server, never a cached pass.
go test "${race[@]}" -count=1 -timeout 60s -v redq
