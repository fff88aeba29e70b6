#!/usr/bin/env bash
# Speed of redq beside Google's Pub/Sub emulator, through the official Pub/Sub
# clients (Python google-cloud-pubsub, Node @google-cloud/pubsub), in one run.
#
#   scripts/pubsub-bench.sh [--quick] [--rounds N] [--only-redq | --only-emulator]
#                           [--lang python|node]... [--no-install] [--keep] [--json FILE]
#
# Starts Google's emulator (gcloud beta emulators pubsub start; in memory) and
# $REDQ_BIN dev (default target/release/redq: a private redis-server with AOF,
# fsync every second, plus the server) on free loopback ports, and runs
# clients/pubsub/bench/bench.py and bench.mjs against each, one program at a time,
# redq then the emulator for each language, N rounds, after an untimed round of the
# --quick sizes (the emulator's JVM is much slower before its JIT has compiled the
# hot paths; each program also warms up with 2,000 messages). Each program runs
# three rows with the client's default batching and flow control:
#
#   publish   100,000 messages of 100 bytes, every future/promise waited for;
#   receive   that backlog read and acked with the streaming subscriber;
#   latency   publish -> subscriber callback at 1,000 msg/s paced for 10 s, the
#             subscriber in a second process; p50 and p99.
#
# Prints one table (row | client | redq | emulator | ratio, each figure the median of
# its rounds; the ratio is redq/emulator for throughput, emulator/redq for latency,
# so >= 1.0 means redq is at least as good) and, from /proc, the CPU each process
# used during the row. Exits 1 when a server did not start or a row did not complete.
#
#   --quick           CI smoke run: 5,000 messages, 3 s of latency, 1 round, no
#                     warm-up round (< 2 min)
#   --rounds N        rounds (default 3; 1 with --quick)
#   --only-redq       run against redq alone
#   --only-emulator   run against the emulator alone
#   --lang L          run only that client (python or node); may be repeated
#   --no-install      skip pip/npm (clients/pubsub/test.sh --install-only did it)
#   --keep            keep the work directory (logs, row records, and after each
#                     program redq's metrics, cumulative since it started, and
#                     Redis' INFO commandstats, reset before each program)
#   --json FILE       write every row record (all rounds) to FILE, one per line
#
# Needs python3, node (18 or later), gcloud with its pubsub-emulator component and
# Java (the emulator), redis-server (redq dev); redis-cli and curl for --keep's
# snapshots. A full run of 3 rounds takes about 8 minutes, 5 rounds about 12.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
redq_bin=${REDQ_BIN:-$root/target/release/redq}
project=${GOOGLE_CLOUD_PROJECT:-demo}
venv=${PUBSUB_VENV:-$root/clients/pubsub/.venv}

servers=(redq emulator)
languages=()
install=1
keep=0
quick=0
rounds=
json=
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --rounds)
      [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "pubsub-bench: --rounds takes a positive number" >&2; exit 2; }
      rounds=$2
      shift
      ;;
    --only-redq) servers=(redq) ;;
    --only-emulator) servers=(emulator) ;;
    --lang)
      if [ $# -lt 2 ] || { [ "$2" != python ] && [ "$2" != node ]; }; then
        echo "pubsub-bench: --lang takes python or node" >&2
        exit 2
      fi
      languages+=("$2")
      shift
      ;;
    --lang=python|--lang=node) languages+=("${1#--lang=}") ;;
    --no-install) install=0 ;;
    --keep) keep=1 ;;
    --json)
      [ $# -ge 2 ] || { echo "pubsub-bench: --json takes a file" >&2; exit 2; }
      json=$2
      shift
      ;;
    -h|--help) sed -n '2,41p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "pubsub-bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ ${#languages[@]} -gt 0 ] || languages=(python node)
quick_sizes=(--count 5000 --seconds 3 --warmup 500)
if [ "$quick" = 1 ]; then
  sizes=("${quick_sizes[@]}")
  rounds=${rounds:-1}
  first_round=1
else
  sizes=(--count 100000 --seconds 10 --warmup 2000)
  rounds=${rounds:-3}
  first_round=0  # round 0: the warm-up round, at the quick sizes, left out of the table
fi
# The latest a program may take when a server hangs (each of its waits is bounded
# too): two throughput rows of at most max(60 s, count / 500 msg/s), the latency
# row's warm-up, publishing, grace and close, the warm-up, setup and cleanup.
count=${sizes[1]}
row_budget=$(( count / 500 > 60 ? count / 500 : 60 ))
program_timeout=$(( 2 * row_budget + 300 ))

say() { echo "pubsub-bench: $*" >&2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/pubsub-bench.XXXXXX")
pids=()  # process-group leaders started here (setsid), stopped by cleanup
# shellcheck source=scripts/pubsub-servers.bash
. "$root/scripts/pubsub-servers.bash"

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  for pgid in "${pids[@]}"; do stop_group "$pgid"; done
  if [ "$keep" = 1 ] || [ "$status" != 0 ]; then
    say "logs and row records kept in $work"
  else
    rm -rf "$work"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Start server $1 (see start_server): sets address[$1] and group[$1].
declare -A address group
start_and_record() {
  start_server "$1" || return 1
  address[$1]=$started_address
  group[$1]=$started_group
}

# The server's processes as label=pid,...: every process of its group (redq and its
# redis-server; gcloud's Python wrapper and the emulator's JVM).
server_pids() {
  ps -e -o pid=,pgid=,comm= | awk -v group="$1" '
    $2 == group {
      label = $3
      if (label == "python3") label = "gcloud"
      printf "%s%s=%s", (n++ ? "," : ""), label, $1
    }'
}

# What redq and its Redis did, for --keep: redq's metrics and Redis' per-command
# CPU since the last reset (reset before each program).
redis_cli() {
  timeout 5 redis-cli -s "$work/redq-data/redis.sock" "$@"
}
redq_snapshot() {
  timeout 5 curl -s "http://127.0.0.1:$metrics_port/metrics" > "$work/$1.metrics.txt" 2>/dev/null || true
  redis_cli INFO commandstats > "$work/$1.commandstats.txt" 2>/dev/null || true
}

for tool in python3 node; do
  command -v "$tool" >/dev/null || { say "$tool not found"; exit 1; }
done
if [ "$install" = 1 ]; then
  "$root/clients/pubsub/test.sh" --install-only "${languages[@]}"
fi

failed=0
for server in "${servers[@]}"; do
  case "$server" in
    emulator)
      if ! command -v gcloud >/dev/null || ! command -v java >/dev/null; then
        say "the emulator needs gcloud (its pubsub-emulator component) and Java 11 or later"
        failed=1
        continue
      fi
      ;;
    redq)
      [ -x "$redq_bin" ] || { say "no redq binary at $redq_bin (cargo build --release, or set REDQ_BIN)"; failed=1; continue; }
      ;;
  esac
  say "starting $server"
  # Not in a $(...) subshell: start_server records the process group and the address.
  if ! start_and_record "$server" > "$work/$server-start.txt" 2>&1; then
    say "$server did not start: $(cat "$work/$server-start.txt")"
    failed=1
    continue
  fi
  say "$server listens on ${address[$server]} ($(server_pids "${group[$server]}"))"
done

for round in $(seq "$first_round" "$rounds"); do
  round_sizes=("${sizes[@]}")
  [ "$round" = 0 ] && round_sizes=("${quick_sizes[@]}")
  for language in "${languages[@]}"; do
    for server in "${servers[@]}"; do
      [ -n "${address[$server]:-}" ] || continue
      case "$language" in
        python) program=("$venv/bin/python" "$root/clients/pubsub/bench/bench.py") ;;
        node) program=(node "$root/clients/pubsub/bench/bench.mjs") ;;
      esac
      name="$server-$language-$round"
      [ "$round" = 0 ] && name="warmup-$name"
      if [ "$round" = 0 ]; then
        say "warm-up round (${round_sizes[1]} messages, not in the table): $language against $server"
      else
        say "round $round of $rounds: $language against $server"
      fi
      [ "$server" = redq ] && { redis_cli CONFIG RESETSTAT >/dev/null 2>&1 || true; }
      # In the background with `wait`, so that a signal stops everything at once (bash
      # runs traps only after a foreground command ends); setsid so that cleanup can
      # stop the program with its latency subscriber.
      status=0
      PUBSUB_EMULATOR_HOST=${address[$server]} GOOGLE_CLOUD_PROJECT=$project \
        setsid timeout -k 5 "$program_timeout" "${program[@]}" "${round_sizes[@]}" \
        --pids "$(server_pids "${group[$server]}")" \
        > "$work/$name.jsonl" 2> "$work/$name.log" < /dev/null &
      pids+=($!)
      wait "$!" || status=$?
      unset 'pids[-1]'
      sed 's/^/pubsub-bench:   /' "$work/$name.log" >&2
      if [ "$status" != 0 ]; then
        say "$language against $server exited with $status"
        failed=1
      fi
      [ "$server" = redq ] && redq_snapshot "$name"
    done
  done
done

shopt -s nullglob
records=("$work"/redq-*.jsonl "$work"/emulator-*.jsonl)  # not the warm-up round's
shopt -u nullglob
[ ${#records[@]} -gt 0 ] || { say "no row records"; exit 1; }
echo
table_status=0
python3 "$root/clients/pubsub/bench/table.py" "${sizes[@]}" --servers "${servers[*]}" \
  --languages "${languages[*]}" ${json:+--json-out "$json"} "${records[@]}" || table_status=$?
[ "$table_status" = 0 ] || failed=1
exit "$failed"
