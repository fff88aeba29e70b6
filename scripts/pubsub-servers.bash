# Sourced by the scripts that run the official Pub/Sub clients against servers
# they start: redq (`redq dev`) and Google's emulator, each in a process group of
# its own on a free loopback port, retried on another port when the one picked was
# taken. The caller sets work (a directory), project, redq_bin and pids=() (the
# process groups to stop on exit, with stop_group).
# shellcheck shell=bash disable=SC2154,SC2034  # work, project, redq_bin: the caller's; started_*: for it

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
  local pid=$1 pattern=$2 port=$3 seconds=$4
  for _ in $(seq 1 $((seconds * 10))); do
    if grep -Eq "$pattern" "$LOG" 2>/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || return 1
    grep -Eq 'Address already in use|cannot listen on' "$LOG" 2>/dev/null && return 1
    sleep 0.1
  done
  return 2
}

# Start server $1 with the command that command_$1 builds for a port, on a new free
# port each time the server exits before it is ready (at most 3 tries). Sets
# started_address (127.0.0.1:port) and started_group (its process group).
start_server() {
  local name=$1 pattern port attempt status
  for attempt in 1 2 3; do
    port=$(free_port)
    LOG="$work/$name.log"
    "command_$name" "$port"
    pattern=${ready_pattern//PORT/$port}
    status=0
    wait_ready "$launched" "$pattern" "$port" 90 || status=$?
    if [ "$status" = 0 ]; then
      started_address="127.0.0.1:$port"
      started_group=$launched
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

# Sets metrics_port.
command_redq() {
  ready_pattern='gRPC on 127\.0\.0\.1:PORT,'
  metrics_port=$(free_port)
  # `redq dev` prints its ready line once both listeners are bound.
  launch "$redq_bin" dev --dir "$work/redq-data" --listen "127.0.0.1:$1" \
    --metrics-listen "127.0.0.1:$metrics_port"
}

