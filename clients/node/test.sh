#!/usr/bin/env bash
# Tests of the Node.js library against the redq server at $REDQ_ADDR, then a
# smoke run of the benchmarks (bench/bench.js --quick). Installs the
# dependencies (npm ci) only when node_modules is missing. Exits non-zero on
# any failure.
set -euo pipefail
cd "$(dirname "$0")"

if [ -z "${REDQ_ADDR:-}" ]; then
  echo "test.sh: set REDQ_ADDR=host:port of a running redq" >&2
  exit 2
fi
if [ ! -d node_modules ]; then
  npm ci --no-audit --no-fund
fi

echo "=== node --test (server $REDQ_ADDR)"
# The spec reporter prints each test and the summary (tests, pass, fail).
timeout 120 node --test --test-reporter=spec test/
echo "=== bench/bench.js --quick"
timeout 60 node bench/bench.js --quick
