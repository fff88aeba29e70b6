#!/usr/bin/env bash
# Durability check of redq's Pub/Sub v1 API with the official Python client: kill -9
# every server process (both redq replicas and Redis) while a publisher and a
# subscriber run, and check that no publish the client saw succeed is lost.
#
#   scripts/pubsub-durability.sh [standalone] [cluster] [--no-install] [--keep]
#
#   standalone  one redis-server (appendonly yes, appendfsync always) and two
#               `redq serve` replicas A and B on it
#   cluster     a 3-master Redis Cluster (the same persistence, no replicas), two
#               replicas with a redis+cluster:// URL; the topic's id is chosen so
#               that its slot and its project's records share a master
#   (no mode: both, one after the other)
#   --no-install  skip pip (clients/pubsub/test.sh --install-only python did it)
#   --keep        keep the work directory (logs, publish and receive logs) on success
#
# In each mode: the topic and its subscription are created through A; a publisher
# (official PublisherClient, PUBSUB_EMULATOR_HOST=A) publishes seq 1, 2, … (attribute
# `seq`) at $DURABILITY_RATE a second (50) for $DURABILITY_PUBLISH_S seconds (20) and
# logs each future's outcome; a subscriber (SubscriberClient streaming pull,
# PUBSUB_EMULATOR_HOST=B) logs every delivery and acks it, at 60 % of the publish
# rate until the publisher is done (so a backlog waits in Redis), then at full speed.
# Meanwhile, at 20 %, 45 %
# and 70 % of the publishing time: kill -9 of A and a restart on its ports, the same
# for B, then kill -9 of redis-server (in cluster mode: of the master holding the
# topic's slot) and a restart from its append-only file in its directory, on its
# port. The subscriber stops once it has every seq that succeeded (or
# $DURABILITY_SETTLE_S (40) seconds after the publisher finished). Each mode prints
#
#   standalone: published N (ok), failed N, received N distinct, lost N, duplicated N (…)
#
# and passes iff lost is 0 (duplicates are allowed: at-least-once). On a loss it
# lists the lost seqs beside the kills. Exits 1 if a mode failed, 2 on bad usage.
# Every wait is bounded and each mode is cut after $DURABILITY_MODE_BUDGET_S
# seconds (110); every process started here is killed on every exit path.
# REDQ_BIN is the server (default target/release/redq), PUBSUB_VENV the client's
# virtualenv (default clients/pubsub/.venv). DURABILITY_REDIS_AOF=no is the negative
# control: Redis without persistence, which the check must fail (messages lost).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
redq_bin=${REDQ_BIN:-$root/target/release/redq}
venv=${PUBSUB_VENV:-$root/clients/pubsub/.venv}
publish_s=${DURABILITY_PUBLISH_S:-20}
rate=${DURABILITY_RATE:-50}
settle_s=${DURABILITY_SETTLE_S:-40}
mode_budget=${DURABILITY_MODE_BUDGET_S:-110}
aof=${DURABILITY_REDIS_AOF:-yes}
helper=$root/scripts/pubsub-durability.py
project=durability
export LC_ALL=C  # a dot in $EPOCHREALTIME

say() { echo "pubsub-durability: $*" >&2; }

# ---------------------------------------------------------------------------
# Process handling, shared by both modes. Every server and client runs in a process
# group of its own (setsid), recorded by name in pgid[] and in $work/pgids, so that
# the cleanup of this script, or the caller of an inner run cut by its timeout, can
# kill exactly these.

declare -A pgid=()
save_pgids() { printf '%s\n' "${pgid[@]}" > "$work/pgids"; }

# launch NAME LOG COMMAND…: starts COMMAND appending its output to LOG; sets launched.
launch() {
  local name=$1 log=$2
  shift 2
  setsid "$@" >> "$log" 2>&1 < /dev/null &
  launched=$!
  pgid[$name]=$launched
  save_pgids
}

# kill9 NAME: SIGKILL to the process group of NAME (right after the fork the child
# may not have called setsid yet: then to its pid), and reap it.
kill9() {
  local pid=${pgid[$1]:-}
  [ -n "$pid" ] || return 0
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  unset 'pgid[$1]'
  save_pgids
}

running() { [ -n "${pgid[$1]:-}" ] && kill -0 "${pgid[$1]}" 2>/dev/null; }

# event WHAT: a timestamped line in events.log (the verdict lines lost seqs up with it).
event() {
  echo "$EPOCHREALTIME $*" >> "$work/events.log"
  say "  $(calc "$EPOCHREALTIME - $t0" '%5.1f') s  $*"
}

# calc EXPRESSION [FORMAT]: floating-point arithmetic (awk's).
calc() { awk "BEGIN { printf \"${2:-%g}\", $1 }"; }

# free_port: a loopback port free now, picked below the kernel's ephemeral range. A
# port the OS picks (bind to port 0) comes from that range, and once its server is
# killed any outgoing connection on the machine may take it as its local port; the
# restart on the same port then fails with "Address already in use" (seen in CI).
free_port() {
  python3 -c '
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(1000):
    port = random.randrange(10000, low)
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
    print(port)
    break
else:
    raise SystemExit("no free port below the ephemeral range")
'
}

cli() { timeout 3 redis-cli -p "$@" 2>/dev/null; }

# ---------------------------------------------------------------------------
# Redis

# start_redis NAME PORT BUS_PORT|- DIR: starts redis-server on PORT with its data in
# DIR (an append-only file, fsynced on every write) and waits (bounded) until it
# answers PING as itself, AOF loaded. 0 when ready, 1 when it exited first (its port
# was taken), 2 on timeout.
start_redis() {
  local name=$1 port=$2 bus=$3 dir=$4 cluster=()
  mkdir -p "$dir"
  [ "$bus" = - ] || cluster=(--cluster-enabled yes --cluster-port "$bus" --cluster-config-file nodes.conf
    --cluster-node-timeout 2000 --cluster-require-full-coverage no)
  echo "=== start $(date -u +%FT%T.%3NZ) on port $port" >> "$dir/redis.log"
  launch "$name" "$dir/redis.log" redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" \
    --appendonly "$aof" --appendfsync always --save "" --logfile "" "${cluster[@]}"
  local pid=$launched i
  for i in $(seq 1 200); do
    if cli "$port" INFO server | tr -d '\r' | grep -qx "process_id:$pid" \
      && [ "$(cli "$port" PING | tr -d '\r')" = PONG ]; then
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { unset 'pgid[$name]'; save_pgids; return 1; }
    sleep 0.1
  done
  return 2
}

# start_redis_free NAME DIR [cluster]: start_redis on free ports (others when they were
# taken before redis-server bound them); sets port (and bus).
start_redis_free() {
  local name=$1 dir=$2 attempt status
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    bus=-
    [ "${3:-}" = cluster ] && bus=$(free_port)
    status=0
    start_redis "$name" "$port" "$bus" "$dir" || status=$?
    [ "$status" = 0 ] && return 0
    [ "$status" = 2 ] && { say "$name not ready on port $port within 20 s"; tail -n 20 "$dir/redis.log" >&2; return 1; }
    rm -f "$dir/nodes.conf"
  done
  say "$name exited before answering on 5 sets of free ports"; tail -n 20 "$dir/redis.log" >&2
  return 1
}

# ---------------------------------------------------------------------------
# redq

# start_redq NAME GRPC_PORT METRICS_PORT: `redq serve` on those ports; waits (bounded)
# for its `serving grpc_addr=… metrics_addr=…` line and sets the ports it serves in
# grpc_port_NAME and metrics_port_NAME. A restart on ports a
# killed replica just held is tried again if it cannot bind yet.
start_redq() {
  local name=$1 grpc=$2 metrics=$3 log=$work/$1.log attempt skip line pid i
  for attempt in 1 2 3; do
    echo "=== start $(date -u +%FT%T.%3NZ)" >> "$log"
    skip=$(wc -l < "$log")
    launch "$name" "$log" "$redq_bin" serve --listen "127.0.0.1:$grpc" --metrics-listen "127.0.0.1:$metrics" \
      --redis-url "$redis_url"
    pid=$launched
    for i in $(seq 1 300); do
      line=$(tail -n "+$((skip + 1))" "$log" | grep -Eo 'serving grpc_addr=127\.0\.0\.1:[0-9]+ metrics_addr=127\.0\.0\.1:[0-9]+' | head -n 1 || true)
      if [ -n "$line" ]; then
        [[ $line =~ grpc_addr=127\.0\.0\.1:([0-9]+)\ metrics_addr=127\.0\.0\.1:([0-9]+) ]]
        printf -v "grpc_port_$name" '%s' "${BASH_REMATCH[1]}"
        printf -v "metrics_port_$name" '%s' "${BASH_REMATCH[2]}"
        return 0
      fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      say "redq $name did not serve within 30 s; its log:"; tail -n 20 "$log" >&2
      return 1
    fi
    wait "$pid" 2>/dev/null || true
    unset 'pgid[$name]'; save_pgids
    say "redq $name exited before serving (try $attempt of 3): $(tail -n 2 "$log" | tr '\n' ' ')"
    sleep 0.5
  done
  return 1
}

# restart_redq NAME: kill -9, then the same command on the same ports.
restart_redq() {
  local name=$1 grpc metrics
  grpc=grpc_port_$name metrics=metrics_port_$name
  event "kill -9 redq $name"
  kill9 "$name"
  sleep 0.5
  start_redq "$name" "${!grpc}" "${!metrics}" || return 1
  event "redq $name serving again on 127.0.0.1:${!grpc}"
}

# ---------------------------------------------------------------------------
# One mode, run as an inner invocation of this script under a timeout.

# at SECONDS: sleeps until SECONDS after the clients started; 1 if the publisher or subscriber died.
at() {
  while [ "$(calc "$EPOCHREALTIME < $t_publish + $1" %d)" = 1 ]; do
    if ! running publisher || ! running subscriber; then
      say "the publisher or the subscriber exited early"
      return 1
    fi
    sleep 0.1
  done
}

# wait_exit NAME SECONDS: waits for a launched process to exit; its exit status, 124 on timeout.
wait_exit() {
  local pid=${pgid[$1]} status=0 i
  for i in $(seq 1 $(($2 * 10))); do
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid" 2>/dev/null || status=$?
      unset 'pgid[$1]'; save_pgids
      return "$status"
    fi
    sleep 0.1
  done
  return 124
}

client() {
  PUBSUB_EMULATOR_HOST=$1 GOOGLE_CLOUD_PROJECT=$project PYTHONUNBUFFERED=1 "$venv/bin/python" "$helper" "${@:2}"
}

# The master serving KEY (its port), from CLUSTER NODES of the node on $1.
master_of() {
  local slot
  slot=$(cli "$1" CLUSTER KEYSLOT "$2" | tr -d '\r')
  cli "$1" CLUSTER NODES | awk -v slot="$slot" '
    $3 ~ /master/ && $3 !~ /fail/ {
      for (i = 9; i <= NF; i++) {
        if ($i ~ /^\[/) continue
        n = split($i, r, "-"); lo = r[1]; hi = (n == 2 ? r[2] : r[1])
        if (slot + 0 >= lo + 0 && slot + 0 <= hi + 0) { split($2, a, "[:@]"); print a[2]; exit }
      }
    }'
}

cluster_ok() {
  local info
  info=$(cli "$1" CLUSTER INFO | tr -d '\r')
  grep -qx 'cluster_state:ok' <<< "$info" && grep -qx 'cluster_slots_ok:16384' <<< "$info"
}

# shellcheck disable=SC2317  # a trap
inner_cleanup() {
  local status=$?
  trap - EXIT INT TERM
  local name
  for name in "${!pgid[@]}"; do kill9 "$name"; done
  exit "$status"
}

# shellcheck disable=SC2154  # grpc_port_A and _B are set by start_redq (printf -v)
run_mode() {
  mode=$1
  work=$2
  mkdir -p "$work"
  trap inner_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  : > "$work/events.log"
  t0=$EPOCHREALTIME
  topic=orders-0
  local ports=() buses=() i killed_redis node redis_port

  if [ "$mode" = standalone ]; then
    start_redis_free redis "$work/redis" || return 1
    ports=("$port")
    redis_url=redis://127.0.0.1:$port
    event "redis-server on 127.0.0.1:$port"
  else
    for i in 0 1 2; do
      start_redis_free "node$i" "$work/node$i" cluster || return 1
      ports+=("$port") buses+=("$bus")
    done
    timeout 30 redis-cli --cluster create "${ports[@]/#/127.0.0.1:}" --cluster-replicas 0 --cluster-yes \
      > "$work/cluster-create.log" 2>&1 || { say "redis-cli --cluster create failed"; cat "$work/cluster-create.log" >&2; return 1; }
    for i in $(seq 1 300); do
      cluster_ok "${ports[0]}" && cluster_ok "${ports[1]}" && cluster_ok "${ports[2]}" && break
      [ "$i" = 300 ] && { say "the cluster did not become ok within 30 s"; return 1; }
      sleep 0.1
    done
    redis_url="redis+cluster://$(IFS=,; echo "${ports[*]/#/127.0.0.1:}")"
    # The topic's keys (tag {P.T}) and its project's records (tag {P}) on one master,
    # so that one kill hits both.
    local records_master topic_master
    records_master=$(master_of "${ports[0]}" "redq:pubsub:{$project}:topics")
    for i in $(seq 0 99); do
      topic=orders-$i
      topic_master=$(master_of "${ports[0]}" "redq:{$project.$topic}:stream")
      [ "$topic_master" = "$records_master" ] && break
    done
    if [ -z "$topic_master" ] || [ "$topic_master" != "$records_master" ]; then
      say "no topic id of 100 hashes to the master of the records"
      return 1
    fi
    for i in 0 1 2; do [ "${ports[$i]}" = "$topic_master" ] && node=$i; done
    event "cluster of 3 masters on ports ${ports[*]}; topic $project.$topic and the records of $project on node$node (port $topic_master)"
  fi

  start_redq A "$(free_port)" "$(free_port)" || return 1
  start_redq B "$(free_port)" "$(free_port)" || return 1
  event "redq A on 127.0.0.1:$grpc_port_A, B on 127.0.0.1:$grpc_port_B"

  client "127.0.0.1:$grpc_port_A" setup "$topic" "$topic-sub" >> "$work/setup.log" 2>&1 \
    || { say "could not create the topic and subscription:"; tail -n 20 "$work/setup.log" >&2; return 1; }
  launch subscriber "$work/subscriber.log" env PUBSUB_EMULATOR_HOST="127.0.0.1:$grpc_port_B" \
    GOOGLE_CLOUD_PROJECT=$project PYTHONUNBUFFERED=1 \
    "$venv/bin/python" "$helper" subscribe "$topic-sub" "$work/published.log" "$work/received.log" "$settle_s" \
    "$(calc "$rate * 0.6")"
  launch publisher "$work/publisher.log" env PUBSUB_EMULATOR_HOST="127.0.0.1:$grpc_port_A" \
    GOOGLE_CLOUD_PROJECT=$project PYTHONUNBUFFERED=1 \
    "$venv/bin/python" "$helper" publish "$topic" "$publish_s" "$rate" "$work/published.log"
  t_publish=$EPOCHREALTIME
  event "publisher on A, subscriber on B started"

  at "$(calc "$publish_s * 0.2")" || return 1
  restart_redq A || return 1
  at "$(calc "$publish_s * 0.45")" || return 1
  restart_redq B || return 1
  at "$(calc "$publish_s * 0.7")" || return 1
  if [ "$mode" = standalone ]; then
    killed_redis=redis redis_port=${ports[0]}
    event "kill -9 redis-server"
  else
    killed_redis=node$node redis_port=${ports[$node]}
    event "kill -9 node$node (master of the topic's slot)"
  fi
  kill9 "$killed_redis"
  sleep 1
  start_redis "$killed_redis" "$redis_port" "${buses[${node:-0}]:--}" "$work/$killed_redis" \
    || { say "$killed_redis did not start again on port $redis_port"; tail -n 20 "$work/$killed_redis/redis.log" >&2; return 1; }
  event "$killed_redis answering again ($(grep -Eo 'DB loaded from append only file: [0-9.]+ seconds' "$work/$killed_redis/redis.log" | tail -n 1 || echo 'no AOF load line'))"
  if [ "$mode" = cluster ]; then
    for i in $(seq 1 300); do
      cluster_ok "${ports[0]}" && cluster_ok "${ports[1]}" && cluster_ok "${ports[2]}" && break
      [ "$i" = 300 ] && { say "the cluster did not become ok again within 30 s"; return 1; }
      sleep 0.1
    done
    event "cluster ok again"
  fi

  local status=0
  wait_exit publisher $((${publish_s%.*} + 70)) || status=$?
  event "publisher exited ($status): $(tail -n 1 "$work/publisher.log")"
  if [ "$status" != 0 ]; then say "the publisher failed; its log:"; tail -n 20 "$work/publisher.log" >&2; fi
  status=0
  wait_exit subscriber $((${settle_s%.*} + 20)) || status=$?
  event "subscriber exited ($status): $(tail -n 1 "$work/subscriber.log")"
  for name in "${!pgid[@]}"; do kill9 "$name"; done

  status=0
  "$venv/bin/python" "$helper" verdict "$mode" "$work/published.log" "$work/received.log" "$work/events.log" \
    > "$work/verdict.txt" || status=$?
  cat "$work/verdict.txt"
  if [ "$status" != 0 ]; then
    for name in A B; do
      echo "== redq $name: warnings and errors"
      grep -E ' (WARN|ERROR) |=== start' "$work/$name.log" | tail -n 30 | sed 's/^/  /'
    done
  fi
  return "$status"
}

if [ "${1:-}" = --inner ]; then
  [ $# = 3 ] || exit 2
  run_mode "$2" "$3"
  exit $?
fi

# ---------------------------------------------------------------------------
# The outer invocation: argument parsing, install, one inner run per mode.

modes=()
install=1
keep=0
for arg in "$@"; do
  case "$arg" in
    standalone|cluster) modes+=("$arg") ;;
    --no-install) install=0 ;;
    --keep) keep=1 ;;
    -h|--help) sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "pubsub-durability: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#modes[@]} -gt 0 ] || modes=(standalone cluster)
[ -x "$redq_bin" ] || { say "no redq binary at $redq_bin (cargo build --release, or set REDQ_BIN)"; exit 2; }
for tool in redis-server redis-cli python3 setsid timeout; do
  command -v "$tool" >/dev/null || { say "$tool is not installed"; exit 2; }
done
if [ "$install" = 1 ]; then
  PUBSUB_VENV=$venv "$root/clients/pubsub/test.sh" --install-only python
fi
[ -x "$venv/bin/python" ] || { say "no virtualenv at $venv (clients/pubsub/test.sh --install-only python)"; exit 2; }

top=$(mktemp -d "${TMPDIR:-/tmp}/pubsub-durability.XXXXXX")
inner=
# kill_leftovers FILE: SIGKILL to the process groups an inner run listed in FILE and
# had not stopped yet (it was cut by SIGKILL before its own cleanup).
kill_leftovers() {
  local pid
  [ -f "$1" ] || return 0
  while read -r pid; do
    [ -z "$pid" ] || kill -KILL -- "-$pid" 2>/dev/null || true
  done < "$1"
}
# shellcheck disable=SC2317  # a trap
outer_cleanup() {
  local status=$?
  trap - EXIT INT TERM
  [ -z "$inner" ] || kill -TERM -- "-$inner" 2>/dev/null || true
  local file
  for file in "$top"/*/pgids; do kill_leftovers "$file"; done
  if [ "$keep" = 1 ] || [ "$status" != 0 ]; then
    say "logs kept in $top"
  else
    rm -rf "$top"
  fi
  exit "$status"
}
trap outer_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

failed=0
summaries=()
for mode in "${modes[@]}"; do
  say "$mode: starting (logs in $top/$mode)"
  start=$EPOCHREALTIME
  # In the background with `wait`, so that a signal reaches the trap at once. timeout
  # signals its own process group; the servers and clients are in groups of their
  # own, killed by the inner run's cleanup or, after SIGKILL, from its pgids file.
  setsid timeout -k 5 "$mode_budget" "$0" --inner "$mode" "$top/$mode" > "$top/$mode.out" 2>&1 < /dev/null &
  inner=$!
  status=0
  wait "$inner" || status=$?
  inner=
  kill_leftovers "$top/$mode/pgids"
  took=$(calc "$EPOCHREALTIME - $start" %.1f)
  cat "$top/$mode.out" >&2
  summary=$(grep -E "^$mode: published " "$top/$mode.out" | tail -n 1 || true)
  if [ "$status" = 124 ] || [ "$status" = 137 ]; then
    summary="$mode: FAILED: cut after $mode_budget s"
  elif [ -z "$summary" ]; then
    summary="$mode: FAILED before the verdict (exit $status)"
  fi
  [ "$status" = 0 ] || failed=1
  summaries+=("$summary [$( [ "$status" = 0 ] && echo pass || echo FAIL ), $took s]")
done

echo
printf '%s\n' "${summaries[@]}"
exit "$failed"
