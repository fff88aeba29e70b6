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
# shellcheck source=scripts/pubsub-servers.bash
. "$root/scripts/pubsub-servers.bash"

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

start_emulator() {
  command -v gcloud >/dev/null || { echo "gcloud is not installed (the emulator is its pubsub-emulator component)"; return 1; }
  command -v java >/dev/null || { echo "java is not installed (the emulator needs Java 11 or later)"; return 1; }
  start_server emulator && address=$started_address
}

start_redq() {
  [ -x "$redq_bin" ] || { echo "no redq binary at $redq_bin (cargo build --release, or set REDQ_BIN)"; return 1; }
  start_server redq && address=$started_address
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
