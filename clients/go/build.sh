#!/usr/bin/env bash
# Builds the Go module offline, in module mode, against Debian's Go packages
# (offline.sh says how): go vet ./..., then the example, bin/redq-example.
#   apt-get install golang-go golang-google-grpc-dev golang-github-golang-protobuf-1-5-dev
# The stubs in redq/v1 are committed (generate.sh makes them); with network,
# plain `go build ./...` works too (README).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
source ./offline.sh
offline_setup

go vet "${offline_flags[@]}" ./...
go build "${offline_flags[@]}" -o bin/redq-example ./cmd/redq-example
echo "built clients/go/bin/redq-example"
