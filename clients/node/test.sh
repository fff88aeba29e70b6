#!/usr/bin/env bash
# Tests of the Node.js library against the redq server at $REDQ_ADDR, then a
# smoke run of the benchmarks (bench/bench.js --quick) and, when NATS
# (127.0.0.1:4222) and RabbitMQ (127.0.0.1:5672) answer, of the comparison
# with them (bench/peers/compare.js --quick). Installs the dependencies (npm
# ci) only when node_modules is missing. $REDQ_PIDS (redq,redis-server) adds
# the server's CPU to the figures. Exits non-zero on any failure.
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
pids=()
[ -n "${REDQ_PIDS:-}" ] && pids=(--pids "$REDQ_PIDS")
timeout 60 node bench/bench.js --quick "${pids[@]}"

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
if listening 4222 && listening 5672; then
  echo "=== bench/peers/compare.js --quick (redq beside JetStream and RabbitMQ)"
  [ -d bench/peers/node_modules ] || (cd bench/peers && npm ci --no-audit --no-fund)
  timeout 180 node bench/peers/compare.js --quick --rounds 1 "${pids[@]}"
else
  echo "=== bench/peers/compare.js: skipped, NATS on 4222 or RabbitMQ on 5672 does not answer"
fi
