#!/usr/bin/env bash
# The benchmark table of the README and BENCHMARKS.md, reproduced in one
# command: redq beside NATS JetStream and RabbitMQ, from Node, in one run.
#
#   scripts/benchmarks.sh [--quick] [--rounds N] [--json FILE]
#
# 1. builds the release binary (cargo build --release --locked);
# 2. starts a private redis-server (no persistence, TCP on a free loopback
#    port, its files in a temporary directory) and `redq serve` with its
#    defaults on ports the system picks (read back from its log line
#    `serving grpc_addr=… metrics_addr=…`);
# 3. runs clients/node/bench/peers/compare.js against it (N rounds, 3 by
#    default, of 100,000 messages per workload; --quick: 1 round of 2,000, a
#    smoke run), which runs redq's workloads through the Node library and
#    then the same workloads against the NATS JetStream (NATS_URL, default
#    127.0.0.1:4222) and RabbitMQ (AMQP_URL, default 127.0.0.1:5672) already
#    running on this machine;
# 4. prints compare.js' table, then the README's: each figure beside the
#    peers' with the ratios redq ÷ JetStream and redq ÷ RabbitMQ;
# 5. stops what it started, also on failure or Ctrl-C.
#
# Needs cargo, redis-server, node (20 or later), python3, and NATS (with
# JetStream) and RabbitMQ answering; installs the Node dependencies with
# `npm ci` where node_modules is missing. A full run takes about 20 minutes
# after the build.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

quick=0
rounds=3
json=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --rounds) rounds=${2:?--rounds needs a number}; shift ;;
    --json) json=${2:?--json needs a file}; shift ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "benchmarks: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$quick" = 1 ] && rounds=1

say() { echo "benchmarks: $*" >&2; }
fail() { say "$*"; exit 1; }
for tool in cargo redis-server redis-cli node npm python3; do
  command -v "$tool" >/dev/null 2>&1 || fail "$tool not found"
done

# Both peers must answer by their protocols, not just hold a port.
node clients/node/test-support/peers.js \
  || fail "NATS JetStream and RabbitMQ must be running (NATS_URL, default 127.0.0.1:4222; AMQP_URL, default 127.0.0.1:5672)"

say "cargo build --release --locked"
cargo build --release --locked --bin redq
redq_bin="${CARGO_TARGET_DIR:-$root/target}/release/redq"
[ -x "$redq_bin" ] || fail "no binary at $redq_bin"

for dir in clients/node clients/node/bench/peers; do
  if [ ! -d "$dir/node_modules" ]; then
    say "npm ci in $dir"
    (cd "$dir" && npm ci --no-audit --no-fund >&2)
  fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/redq-benchmarks.XXXXXX")
redis_pid=""
redq_pid=""
cleanup() {
  local status=$?
  set +e
  for pid in $redq_pid $redis_pid; do
    kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  done
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Redis as the figures were taken: no persistence, TCP loopback. The port
# comes from the system (bind to 0, read it, close); if another program takes
# it before redis-server does, try another.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
for attempt in 1 2 3 4 5; do
  redis_port=$(free_port)
  redis-server --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no \
    --dir "$work" --logfile "$work/redis.log" &
  redis_pid=$!
  for _ in $(seq 100); do
    redis-cli -p "$redis_port" ping 2>/dev/null | grep -q PONG && break
    kill -0 "$redis_pid" 2>/dev/null || break
    sleep 0.1
  done
  redis-cli -p "$redis_port" ping 2>/dev/null | grep -q PONG && break
  kill "$redis_pid" 2>/dev/null || true
  wait "$redis_pid" 2>/dev/null || true
  redis_pid=""
  say "redis-server did not start on port $redis_port (attempt $attempt)"
done
[ -n "$redis_pid" ] || { cat "$work/redis.log" >&2; fail "redis-server did not start"; }

"$redq_bin" serve --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
  --redis-url "redis://127.0.0.1:$redis_port" 2>"$work/redq.log" &
redq_pid=$!
serving() { sed -n 's/.*serving grpc_addr=\([^ ]*\) metrics_addr=\([^ ]*\).*/\1 \2/p' "$work/redq.log" | head -1; }
for _ in $(seq 100); do
  [ -n "$(serving)" ] && break
  kill -0 "$redq_pid" 2>/dev/null || break
  sleep 0.2
done
read -r grpc_addr metrics_addr <<<"$(serving)" || true
[ -n "${metrics_addr:-}" ] || { cat "$work/redq.log" >&2; fail "redq serve did not start"; }
ready() { python3 -c 'import sys, urllib.request; urllib.request.urlopen(f"http://{sys.argv[1]}/readyz", timeout=1)' "$metrics_addr" 2>/dev/null; }
for _ in $(seq 100); do ready && break; sleep 0.2; done
ready || { cat "$work/redq.log" >&2; fail "redq serve did not become ready"; }
say "redis-server pid $redis_pid on 127.0.0.1:$redis_port; redq serve pid $redq_pid on $grpc_addr (metrics $metrics_addr)"

size=(--count 100000)
[ "$quick" = 1 ] && size=(--quick)
figures="$work/compare.json"
say "compare.js: $rounds round(s) of redq, JetStream and RabbitMQ"
node clients/node/bench/peers/compare.js --addr "$grpc_addr" --pids "$redq_pid,$redis_pid" \
  --rounds "$rounds" "${size[@]}" --json "$figures"
[ -n "$json" ] && cp "$figures" "$json"

# The README's table: medians of the rounds, and the ratios.
echo
node --input-type=module - "$figures" <<'EOF'
import { readFileSync } from 'node:fs';
const { rounds, figures } = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const median = (xs) => {
  const s = xs.filter((x) => typeof x === 'number').sort((a, b) => a - b);
  if (s.length === 0) return undefined;
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const get = (workload, system, field) => median((figures[`${workload}\t${system}`] ?? []).map((f) => f[field]));
const rows = [
  ['publish 1 message per call, 50 outstanding, msg/s', 'publish-1x50', 'msgPerSec', 0],
  ['consume + ack, 100 outstanding, msg/s', 'consume-ack', 'msgPerSec', 0],
  ['publish → handler at 2,000 msg/s, p50 ms', 'e2e-2000', 'p50Ms', 3],
  ['publish → handler at 2,000 msg/s, p99 ms', 'e2e-2000', 'p99Ms', 3],
  ['publish → handler, server CPU µs/msg', 'e2e-2000', 'serverUs', 1],
  ['batches of 1,000, msg/s', 'batch-1000', 'msgPerSec', 0],
];
const num = (x, digits) =>
  x === undefined ? '–' : x.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
const ratio = (a, b) => (a === undefined || b === undefined || b === 0 ? '–' : (a / b).toFixed(2));
console.log(`Medians of ${rounds} round(s); a ratio above 1 favours redq in throughput, below 1 in latency and CPU.`);
console.log('');
console.log('| workload | redq | JetStream | RabbitMQ | redq ÷ JetStream | redq ÷ RabbitMQ |');
console.log('|---|---:|---:|---:|---:|---:|');
for (const [label, workload, field, digits] of rows) {
  const [r, n, q] = ['redq', 'nats', 'rabbitmq'].map((s) => get(workload, s, field));
  console.log(`| ${label} | ${num(r, digits)} | ${num(n, digits)} | ${num(q, digits)} | ${ratio(r, n)} | ${ratio(r, q)} |`);
}
EOF
