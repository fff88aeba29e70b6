#!/usr/bin/env bash
# Differential test of redq's Pub/Sub v1 API against Google's Pub/Sub emulator.
#
#   scripts/pubsub-differential.sh [--only-emulator | --only-redq] [--lang python|node]... [--no-install] [--keep]
#
# Starts Google's emulator (gcloud beta emulators pubsub start; needs Java) and
# redq ($REDQ_BIN dev, default target/release/redq: a private redis-server plus the
# server) on free loopback ports, runs the example programs of clients/pubsub/
# (official Python and Node clients) against each through clients/pubsub/test.sh,
# and diffs each program's JSON between the two servers. Prints a table
# (program x server: ok/FAILED) and the diffs; exits 1 on any failure or
# difference, 2 on bad usage. Both servers are stopped on every exit path.
#
#   --only-emulator   run against the emulator alone (no diff)
#   --only-redq       run against redq alone (no diff)
#   --lang L          run only that program (python or node); may be repeated
#   --no-install      skip pip/npm (clients/pubsub/test.sh --install-only did it)
#   --keep            keep the work directory (logs, JSON) even when all passed
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
redq_bin=${REDQ_BIN:-$root/target/release/redq}
project=${GOOGLE_CLOUD_PROJECT:-demo}

servers=(emulator redq)
languages=()
install=1
keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --only-emulator) servers=(emulator) ;;
    --only-redq) servers=(redq) ;;
    --lang)
      [ $# -ge 2 ] && { [ "$2" = python ] || [ "$2" = node ]; } \
        || { echo "pubsub-differential: --lang takes python or node" >&2; exit 2; }
      languages+=("$2")
      shift
      ;;
    --lang=python|--lang=node) languages+=("${1#--lang=}") ;;
    --no-install) install=0 ;;
    --keep) keep=1 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "pubsub-differential: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ ${#languages[@]} -gt 0 ] || languages=(python node)

work=$(mktemp -d "${TMPDIR:-/tmp}/pubsub-differential.XXXXXX")
pids=()  # process-group leaders started here (setsid), stopped by cleanup

# Stop one process group: SIGTERM (redq dev then stops its redis-server; gcloud its
# JVM), SIGKILL to whatever of the group is left after a bounded wait. Right after
# the fork the child may not have called setsid yet: then its pid alone is signalled.
signal_group() {
  kill "-$1" -- "-$2" 2>/dev/null || kill "-$1" "$2" 2>/dev/null
}
stop_group() {
  local pgid=$1
  signal_group TERM "$pgid" || return 0
  for _ in $(seq 1 50); do
    signal_group 0 "$pgid" || break
    sleep 0.1
  done
  signal_group KILL "$pgid" || true
  wait "$pgid" 2>/dev/null || true
}

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  for pgid in "${pids[@]}"; do stop_group "$pgid"; done
  if [ "$keep" = 1 ] || [ "$status" != 0 ]; then
    echo "pubsub-differential: logs and outputs kept in $work" >&2
  else
    rm -rf "$work"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Start "$@" in a process group of its own with its output in log file $LOG; sets
# launched to its pid (= its process group) and records it for cleanup.
launch() {
  setsid "$@" > "$LOG" 2>&1 < /dev/null &
  launched=$!
  pids+=("$launched")
}

# Wait until process $1 has written its ready line (regex $2) to $LOG and 127.0.0.1:$3
# accepts connections: 0 when ready, 1 when the process exited or could not bind its
# port first, 2 after $4 s. The log line matters: a free port picked by binding port 0
# can be taken by another process before the server binds it, and then the port
# answers but not our server (the emulator's JVM even keeps running after that).
wait_ready() {
  local pid=$1 pattern=$2 port=$3 seconds=$4 i
  for i in $(seq 1 $((seconds * 10))); do
    if grep -Eq "$pattern" "$LOG" 2>/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || return 1
    grep -Eq 'Address already in use|cannot listen on' "$LOG" 2>/dev/null && return 1
    sleep 0.1
  done
  return 2
}

# Start server $1 with the command that start_$1 builds for a port, on a new free
# port each time the server exits before it is ready (at most 3 tries).
start_with_retries() {
  local name=$1 pattern port attempt status
  for attempt in 1 2 3; do
    port=$(free_port)
    LOG="$work/$name.log"
    "command_$name" "$port"
    pattern=${ready_pattern//PORT/$port}
    status=0
    wait_ready "$launched" "$pattern" "$port" 90 || status=$?
    if [ "$status" = 0 ]; then
      address="127.0.0.1:$port"
      return 0
    fi
    stop_group "$launched"
    unset 'pids[-1]'
    cp "$LOG" "$work/$name.attempt$attempt.log"
    if [ "$status" = 2 ]; then
      echo "$name was not ready on 127.0.0.1:$port within 90 s; its log:"
      tail -n 20 "$LOG"
      return 1
    fi
    echo "$name exited before it was ready on 127.0.0.1:$port (try $attempt of 3); its log:"
    tail -n 5 "$LOG"
  done
  return 1
}

command_emulator() {
  mkdir -p "$work/emulator-data"
  ready_pattern='Server started, listening on PORT$'
  # No prompts, no update check, no usage reports: this talks to loopback only.
  CLOUDSDK_CORE_DISABLE_PROMPTS=1 \
    CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK=1 \
    CLOUDSDK_CORE_DISABLE_USAGE_REPORTING=1 \
    launch gcloud beta emulators pubsub start --host-port="127.0.0.1:$1" --project="$project" \
    --data-dir="$work/emulator-data"
}

command_redq() {
  ready_pattern='gRPC on 127\.0\.0\.1:PORT,'
  # `redq dev` prints its ready line once both listeners are bound.
  launch "$redq_bin" dev --dir "$work/redq-data" --listen "127.0.0.1:$1" \
    --metrics-listen "127.0.0.1:$(free_port)"
}

start_emulator() {
  command -v gcloud >/dev/null || { echo "gcloud is not installed (the emulator is its pubsub-emulator component)"; return 1; }
  command -v java >/dev/null || { echo "java is not installed (the emulator needs Java 11 or later)"; return 1; }
  start_with_retries emulator
}

start_redq() {
  [ -x "$redq_bin" ] || { echo "no redq binary at $redq_bin (cargo build --release, or set REDQ_BIN)"; return 1; }
  start_with_retries redq
}

if [ "$install" = 1 ]; then
  "$root/clients/pubsub/test.sh" --install-only "${languages[@]}"
fi

declare -A state  # "$server $language" -> ok / FAILED (...)
for server in "${servers[@]}"; do
  address=
  echo "pubsub-differential: starting $server" >&2
  # Not in a $(...) subshell: start_* records the process group and the address.
  if ! "start_$server" > "$work/$server-start.txt" 2>&1; then
    echo "pubsub-differential: $server did not start: $(cat "$work/$server-start.txt")" >&2
    for language in "${languages[@]}"; do state["$server $language"]="FAILED (server did not start)"; done
    continue
  fi
  sed 's/^/pubsub-differential:   /' "$work/$server-start.txt" >&2  # earlier tries, if any
  echo "pubsub-differential: $server listens on $address" >&2
  # In the background with `wait`, so that a signal stops everything at once (bash
  # runs traps only after a foreground command ends).
  PUBSUB_EMULATOR_HOST=$address PUBSUB_OUT="$work/$server" GOOGLE_CLOUD_PROJECT=$project \
    setsid "$root/clients/pubsub/test.sh" --no-install "${languages[@]}" > "$work/$server-test.log" 2>&1 < /dev/null &
  pids+=($!)
  wait "$!" || true
  unset 'pids[-1]'
  for language in "${languages[@]}"; do
    status=$(cat "$work/$server/$language.status" 2>/dev/null || echo "?")
    ms=$(cat "$work/$server/$language.ms" 2>/dev/null || echo 0)
    if [ "$status" = 0 ]; then
      state["$server $language"]="ok ($((ms / 1000)).$((ms % 1000 / 100)) s)"
    else
      state["$server $language"]="FAILED (exit $status)"
    fi
  done
  # Each server is stopped once its programs ran: one JVM or redq at a time.
  stop_group "${pids[-1]}"
  unset 'pids[-1]'
done

failed=0
echo
printf '%-8s' "program"
for server in "${servers[@]}"; do printf ' | %-29s' "$server"; done
[ ${#servers[@]} -eq 2 ] && printf ' | %s' "same JSON"
echo
for language in "${languages[@]}"; do
  printf '%-8s' "$language"
  for server in "${servers[@]}"; do
    printf ' | %-29s' "${state["$server $language"]}"
    [[ ${state["$server $language"]} == ok* ]] || failed=1
  done
  if [ ${#servers[@]} -eq 2 ]; then
    if [ ! -s "$work/emulator/$language.json" ] || [ ! -s "$work/redq/$language.json" ]; then
      printf ' | %s' "-"
      failed=1
    elif diff -q "$work/emulator/$language.json" "$work/redq/$language.json" >/dev/null; then
      printf ' | %s' "yes"
    else
      printf ' | %s' "NO"
      failed=1
    fi
  fi
  echo
done

for language in "${languages[@]}"; do
  for server in "${servers[@]}"; do
    [[ ${state["$server $language"]} == ok* ]] && continue
    [ -s "$work/$server/$language.log" ] || continue
    echo
    echo "== $language against $server: stderr"
    tail -n 20 "$work/$server/$language.log" | sed 's/^/  /'
  done
  if [ ${#servers[@]} -eq 2 ] && [ -s "$work/emulator/$language.json" ] && [ -s "$work/redq/$language.json" ] \
    && ! diff -q "$work/emulator/$language.json" "$work/redq/$language.json" >/dev/null; then
    echo
    echo "== $language: emulator (-) vs redq (+)"
    diff -u --label "emulator/$language.json" --label "redq/$language.json" \
      "$work/emulator/$language.json" "$work/redq/$language.json" || true
  fi
done
# With one server there is nothing to diff: show what it printed instead.
if [ ${#servers[@]} -eq 1 ]; then
  for language in "${languages[@]}"; do
    [ -s "$work/${servers[0]}/$language.json" ] || continue
    echo
    echo "== $language against ${servers[0]}"
    cat "$work/${servers[0]}/$language.json"
  done
fi
exit "$failed"
