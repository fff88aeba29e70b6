#!/usr/bin/env bash
# Generates the stubs of ../../proto/redq/v1/{queue,admin}.proto into redq/v1
# (committed), or into the folder given (test.sh compares the two, so stubs
# that drift from the proto fail CI). Run it after changing the proto:
#   apt-get install protobuf-compiler protoc-gen-go protoc-gen-go-grpc
#   clients/go/generate.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
out="${1:-redq/v1}"

hint="apt-get install protobuf-compiler protoc-gen-go protoc-gen-go-grpc"
for tool in protoc protoc-gen-go protoc-gen-go-grpc; do
  command -v "$tool" >/dev/null || { echo "FAIL: go client: $tool not found: $hint" >&2; exit 1; }
done

# The redq protos have no go_package option: map them to the package redq/v1
# of this module (package redqv1). queue.proto imports google.rpc.Status:
# its Go package, from genproto, is used as is, never generated here.
module=$(sed -n 's/^module //p' go.mod)
map="Mredq/v1/queue.proto=$module/redq/v1;redqv1,Mredq/v1/admin.proto=$module/redq/v1;redqv1"
map="$map,Mgoogle/rpc/status.proto=google.golang.org/genproto/googleapis/rpc/status"
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
protoc -I ../../proto \
  --go_out="$gen" --go_opt="$map" \
  --go-grpc_out="$gen" --go-grpc_opt="$map" \
  ../../proto/redq/v1/queue.proto ../../proto/redq/v1/admin.proto
mkdir -p "$out"
rm -f "$out"/*.pb.go
cp "$gen/$module/redq/v1/"*.pb.go "$out/"
