#!/usr/bin/env bash
# Runs the example clients (clients/python, clients/node, clients/go) against a
# running redq at $REDQ_ADDR (default 127.0.0.1:50051), then the README's
# cross-language walkthrough: a message published from Python, received in Go.
# Installs nothing: see clients/README.md for the prerequisites.
# Exits non-zero if a prerequisite is missing or any client fails.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
export REDQ_ADDR="${REDQ_ADDR:-127.0.0.1:50051}"
python="${PYTHON:-python3}"

# Prerequisites first, so that a missing one fails in a second, not after a build.
missing() { echo "run-clients: $1" >&2; exit 2; }
command -v "$python" >/dev/null || missing "$python not found (set PYTHON=...)"
"$python" -c 'import grpc, google.protobuf, google.rpc.status_pb2' 2>/dev/null ||
  missing "python grpcio/protobuf/googleapis-common-protos missing: $python -m pip install -r clients/python/requirements.txt"
command -v node >/dev/null || missing "node not found: apt-get install nodejs npm"
[ -d "$root/clients/node/node_modules/@grpc/grpc-js" ] && [ -d "$root/clients/node/node_modules/@grpc/proto-loader" ] ||
  missing "node modules missing: (cd clients/node && npm ci)"
for tool in go protoc protoc-gen-go protoc-gen-go-grpc; do
  command -v "$tool" >/dev/null ||
    missing "$tool not found: apt-get install golang-go protobuf-compiler protoc-gen-go protoc-gen-go-grpc golang-google-grpc-dev golang-github-golang-protobuf-1-5-dev"
done

passed=0
failed=0
failures=()
step() { # step NAME COMMAND...
  local name="$1"
  shift
  echo "=== $name"
  if "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    failures+=("$name")
  fi
}
# Each client bounds its own waits (15 s); this is a backstop against a hang.
bounded() { # bounded SECONDS COMMAND...
  local limit="$1" rc=0
  shift
  timeout "$limit" "$@" || rc=$?
  [ "$rc" = 124 ] && echo "FAIL: $*: killed after ${limit}s" >&2
  return "$rc"
}

# The walkthrough of clients/README.md, with its own topic and a payload to find.
walkthrough() {
  local topic payload out
  topic="walkthrough-$(date +%s)-$$"
  payload="hello from Python $$"
  bounded 30 "$python" "$root/clients/python/client.py" publish "$topic" "$payload" --attr from=python || return 1
  out="$(bounded 30 "$root/clients/go/bin/redq-example" receive -topic "$topic" -count 1)" || return 1
  echo "$out"
  grep -qF "\"$payload\"" <<<"$out" || { echo "FAIL: the go client did not receive \"$payload\"" >&2; return 1; }
}

step python bounded 60 "$python" "$root/clients/python/client.py"
step node bounded 60 node "$root/clients/node/client.js"
echo "=== go: build"
if bounded 600 "$root/clients/go/build.sh"; then
  step go bounded 60 "$root/clients/go/bin/redq-example"
  step "python->go" walkthrough
else
  echo "FAIL: go client: build failed" >&2
  failed=$((failed + 2))
  failures+=(go "python->go")
fi

echo
[ "$failed" -gt 0 ] && echo "run-clients: failed: ${failures[*]}" >&2
echo "clients: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
