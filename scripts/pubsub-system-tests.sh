#!/usr/bin/env bash
# Runs the official Python client's own system tests (tests/system.py of the
# google-cloud-pubsub sdist on PyPI) against a Pub/Sub v1 gRPC server, the way
# a user points an official client at an emulator (PUBSUB_EMULATOR_HOST).
#
# Usage:
#   scripts/pubsub-system-tests.sh --emulator          # Google's emulator (gcloud)
#   scripts/pubsub-system-tests.sh --redq PATH/TO/redq # `redq dev` on free ports
#   scripts/pubsub-system-tests.sh --addr HOST:PORT [--expect redq|emulator]
#                                                      # a server already running
# Options:
#   --only EXPR   run only the tests matching the pytest -k expression EXPR
#                 (tests left out are then not reported as missing)
#   --flaky       let the flaky plugin rerun the tests that tests/system.py
#                 marks flaky (up to 5 runs each); off by default, so that each
#                 test runs once and the outcome is deterministic and quick
#   --keep        keep the temporary directory (logs, junit.xml, venv)
#
# Each run downloads the sdist into a temporary directory (nothing of it is
# kept in this repository), installs the pinned packages of
# scripts/pubsub-system-tests-requirements.txt into a throw-away venv there
# (not into the system Python: google-cloud-pubsub needs protobuf < 7 while
# clients/python needs protobuf >= 7), writes a fake authorized_user
# credentials file, starts the server on free loopback ports, runs pytest with
# -k "not rest" (redq and the emulator speak gRPC only) and compares every
# test's outcome with the lists below. It exits 0 only when the outcome is
# exactly the expected one for the mode. Needs python3 with venv and pip, and
# network access to PyPI; --emulator also needs gcloud with the Debian package
# google-cloud-cli-pubsub-emulator and Java 17.
set -euo pipefail
cd "$(dirname "$0")/.."

PUBSUB_VERSION=2.35.0
PROJECT=redq-systests
MODULE=tests/system.py
PER_TEST_TIMEOUT=120 # seconds; the slowest test waits 60 s by design
TOTAL_TIMEOUT=600    # seconds for the whole pytest run

# Every test that `pytest -k "not rest"` selects from tests/system.py of
# google-cloud-pubsub 2.35.0 (the fixtures are parametrized over the grpc and
# rest transports; -k "not rest" keeps the grpc ones).
ALL_TESTS=(
  "$MODULE::test_publish_messages[grpc]"
  "$MODULE::test_publish_large_messages[grpc]"
  "$MODULE::test_subscribe_to_messages[grpc-grpc]"
  "$MODULE::test_subscribe_to_messages_async_callbacks[grpc-grpc]"
  "$MODULE::test_creating_subscriptions_with_non_default_settings[grpc-grpc]"
  "$MODULE::test_listing_project_topics[grpc]"
  "$MODULE::test_listing_project_subscriptions[grpc-grpc]"
  "$MODULE::test_listing_topic_subscriptions[grpc-grpc]"
  "$MODULE::test_managing_topic_iam_policy[grpc]"
  "$MODULE::test_managing_subscription_iam_policy[grpc-grpc]"
  "$MODULE::test_subscriber_not_leaking_open_sockets[grpc-grpc-grpc]"
  "$MODULE::test_synchronous_pull_no_deadline_error_if_no_messages[grpc-grpc]"
  "$MODULE::TestStreamingPull::test_streaming_pull_callback_error_propagation[grpc-grpc]"
  "$MODULE::TestStreamingPull::test_streaming_pull_ack_deadline[grpc-grpc]"
  "$MODULE::TestStreamingPull::test_streaming_pull_max_messages[grpc-grpc]"
  "$MODULE::TestStreamingPull::test_streaming_pull_blocking_shutdown[grpc-grpc]"
  "$MODULE::TestBasicRBAC::test_streaming_pull_subscriber_permissions_sufficient[grpc-grpc]"
  "$MODULE::TestBasicRBAC::test_publisher_role_can_publish_messages[grpc-grpc]"
  "$MODULE::TestBasicRBAC::test_snapshot_seek_subscriber_permissions_sufficient[grpc-grpc]"
  "$MODULE::TestBasicRBAC::test_viewer_role_can_list_resources[grpc-grpc]"
  "$MODULE::TestBasicRBAC::test_editor_role_can_create_resources[grpc-grpc]"
)

# The IAM policy tests call google.iam.v1.IAMPolicy/GetIamPolicy and
# SetIamPolicy, which neither redq nor the emulator implements (both answer
# UNIMPLEMENTED).
IAM_TESTS=(
  "$MODULE::test_managing_topic_iam_policy[grpc]"
  "$MODULE::test_managing_subscription_iam_policy[grpc-grpc]"
)

# Skipped everywhere but on Google's own CI: the class is skipped unless
# KOKORO_GFILE_DIR names service-account files with limited roles (this
# script unsets it).
SKIPPED_TESTS=(
  "$MODULE::TestBasicRBAC::test_streaming_pull_subscriber_permissions_sufficient[grpc-grpc]"
  "$MODULE::TestBasicRBAC::test_publisher_role_can_publish_messages[grpc-grpc]"
  "$MODULE::TestBasicRBAC::test_snapshot_seek_subscriber_permissions_sufficient[grpc-grpc]"
  "$MODULE::TestBasicRBAC::test_viewer_role_can_list_resources[grpc-grpc]"
  "$MODULE::TestBasicRBAC::test_editor_role_can_create_resources[grpc-grpc]"
)

# redq: every selected test passes; the IAM tests are deselected (not run)
# because redq answers UNIMPLEMENTED for IAM by design.
REDQ_DESELECTED=("${IAM_TESTS[@]}")
REDQ_EXPECTED_FAILURES=()

# The emulator (gcloud's pubsub-emulator): the IAM tests fail with
# UNIMPLEMENTED, and test_streaming_pull_blocking_shutdown fails because the
# emulator ignores the nacks (ModifyAckDeadline with ack_deadline_seconds=0)
# that the client sends at shutdown for messages it received but never handed
# to a callback: they are not redelivered within the test's 5 s.
EMULATOR_DESELECTED=()
EMULATOR_EXPECTED_FAILURES=(
  "${IAM_TESTS[@]}"
  "$MODULE::TestStreamingPull::test_streaming_pull_blocking_shutdown[grpc-grpc]"
)

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 2
}
fail() { echo "pubsub-system-tests: $*" >&2; exit 1; }
say() { echo "pubsub-system-tests: $*"; }

mode="" redq_bin="" addr="" expect="redq" only="" flaky=0 keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --emulator) mode=emulator; expect=emulator ;;
    --redq) [ $# -ge 2 ] || usage; mode=redq; expect=redq; redq_bin="$2"; shift ;;
    --addr) [ $# -ge 2 ] || usage; mode=addr; addr="$2"; shift ;;
    --expect) [ $# -ge 2 ] || usage; expect="$2"; shift ;;
    --only) [ $# -ge 2 ] || usage; only="$2"; shift ;;
    --flaky) flaky=1 ;;
    --keep) keep=1 ;;
    -h|--help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
  shift
done
[ -n "$mode" ] || usage
case "$expect" in redq|emulator) ;; *) fail "--expect must be redq or emulator" ;; esac
if [ "$mode" = redq ]; then
  [ -x "$redq_bin" ] || fail "not an executable: $redq_bin"
  redq_bin="$(realpath "$redq_bin")"
fi
if [ "$mode" = emulator ]; then
  command -v gcloud >/dev/null 2>&1 || fail "gcloud not found (Debian: apt-get install google-cloud-cli google-cloud-cli-pubsub-emulator openjdk-17-jre-headless)"
  command -v java >/dev/null 2>&1 || fail "java not found (the emulator needs Java 17: apt-get install openjdk-17-jre-headless)"
fi

helper="$PWD/scripts/pubsub-system-tests-helper.py"
requirements="$PWD/scripts/pubsub-system-tests-requirements.txt"
started=$(date +%s)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pubsub-systests.XXXXXX")
server_pgid=""
server_kind=""
pytest_pid=""

stop_server() {
  [ -n "$server_pgid" ] || return 0
  local pgid=$server_pgid
  server_pgid=""
  if [ "$server_kind" = redq ]; then
    # SIGTERM to redq alone: it shuts down gracefully and stops its redis-server.
    kill -TERM "$pgid" 2>/dev/null || true
    for _ in $(seq 150); do kill -0 "$pgid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pgid" 2>/dev/null && echo "pubsub-system-tests: redq did not stop within 30 s of SIGTERM" >&2
  else
    # gcloud runs the emulator's JVM as its child: signal the whole group.
    kill -TERM -- "-$pgid" 2>/dev/null || true
  fi
  # Whatever is left of the group (a JVM, a redis-server): TERM, then KILL.
  for _ in $(seq 50); do kill -0 -- "-$pgid" 2>/dev/null || break; sleep 0.2; done
  kill -TERM -- "-$pgid" 2>/dev/null || true
  for _ in $(seq 25); do kill -0 -- "-$pgid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL -- "-$pgid" 2>/dev/null || true
  wait 2>/dev/null || true
}

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [ -n "$pytest_pid" ]; then
    # timeout passes the TERM on to pytest.
    kill -TERM "$pytest_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pytest_pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pytest_pid" 2>/dev/null || true
  fi
  stop_server
  if [ "$keep" = 1 ]; then
    say "kept $tmp"
  else
    rm -rf "$tmp"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Starts "$@" as the leader of a new process group (its pid is the group id),
# with stdout and stderr to $1. Sets server_pgid.
start_group() {
  local log=$1; shift
  rm -f "$tmp/leader.pid"
  # shellcheck disable=SC2016 # $$, $0 and $@ are the inner shell's
  setsid bash -c 'echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec "$@"' "$tmp/leader.pid" "$@" \
    >"$log" 2>&1 </dev/null &
  for _ in $(seq 100); do [ -s "$tmp/leader.pid" ] && break; sleep 0.05; done
  [ -s "$tmp/leader.pid" ] || fail "could not start $1"
  server_pgid=$(cat "$tmp/leader.pid")
}

# Waits until the server's group listens on the port. 0: ready; 1: it bound
# nothing and the log says the port was taken (try other ports); else fails.
await_server() {
  local port=$1 log=$2 seconds=$3 rc=0
  python3 "$helper" wait-listen "$server_pgid" "$port" "$seconds" "$log" || rc=$?
  [ "$rc" = 0 ] && return 0
  if [ "$rc" = 3 ]; then
    say "port $port was taken before the server bound it; trying other ports"
    stop_server
    return 1
  fi
  sed 's/^/  | /' "$log" >&2
  if [ "$rc" = 1 ]; then fail "the server exited before listening on port $port (log above)"; fi
  fail "the server did not listen on port $port within $seconds s (log above)"
}

start_emulator() {
  local port log="$tmp/emulator.log"
  mkdir -p "$tmp/emulator-data" "$tmp/gcloud-config"
  for _ in 1 2 3 4 5; do
    port=$(python3 "$helper" free-port)
    say "starting the Pub/Sub emulator on 127.0.0.1:$port"
    server_kind=emulator
    start_group "$log" env CLOUDSDK_CONFIG="$tmp/gcloud-config" CLOUDSDK_CORE_DISABLE_PROMPTS=1 \
      gcloud beta emulators pubsub start \
      --host-port="127.0.0.1:$port" --project="$PROJECT" --data-dir="$tmp/emulator-data"
    if await_server "$port" "$log" 90; then
      addr="127.0.0.1:$port"
      return 0
    fi
  done
  fail "could not start the emulator on a free port in 5 tries"
}

start_redq() {
  local port metrics_port log="$tmp/redq.log"
  for _ in 1 2 3 4 5; do
    port=$(python3 "$helper" free-port)
    metrics_port=$(python3 "$helper" free-port)
    [ "$port" != "$metrics_port" ] || continue
    rm -rf "$tmp/redq-dev"
    say "starting $redq_bin dev on 127.0.0.1:$port (metrics 127.0.0.1:$metrics_port)"
    server_kind=redq
    start_group "$log" "$redq_bin" dev --dir "$tmp/redq-dev" \
      --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$metrics_port"
    if await_server "$port" "$log" 60; then
      addr="127.0.0.1:$port"
      return 0
    fi
  done
  fail "could not start redq on free ports in 5 tries"
}

# 1. The tests: tests/system.py from the sdist, fetched anew each run.
say "downloading the google-cloud-pubsub $PUBSUB_VERSION sdist"
python3 -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
  -d "$tmp/sdist" "google-cloud-pubsub==$PUBSUB_VERSION" \
  || fail "pip download of google-cloud-pubsub==$PUBSUB_VERSION failed"
sdists=("$tmp"/sdist/google[-_]cloud[-_]pubsub-"$PUBSUB_VERSION".tar.gz)
sdist=${sdists[0]}
[ -f "$sdist" ] || fail "no sdist in $tmp/sdist"
mkdir -p "$tmp/run/tests"
tar -xzf "$sdist" -C "$tmp/sdist" --wildcards "*/$MODULE"
cp "$tmp"/sdist/*/"$MODULE" "$tmp/run/$MODULE"
# An empty ini file pins pytest's rootdir to the run directory, away from any
# configuration above it.
printf '[pytest]\n' >"$tmp/run/pytest.ini"

# 2. The packages, pinned, in a throw-away venv.
say "installing the pinned packages into a venv"
python3 -m venv "$tmp/venv" >/dev/null \
  || fail "python3 -m venv failed (Debian: apt-get install python3-venv)"
"$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements" \
  || fail "pip install -r $requirements failed"

# 3. Throw-away credentials: the tests call google.auth.default(), which needs
# some; with PUBSUB_EMULATOR_HOST set the clients never use them.
cat >"$tmp/fake-credentials.json" <<'EOF'
{
  "type": "authorized_user",
  "client_id": "pubsub-system-tests.apps.googleusercontent.com",
  "client_secret": "not-a-secret",
  "refresh_token": "not-a-token"
}
EOF

# 4. The server.
case "$mode" in
  emulator) start_emulator ;;
  redq) start_redq ;;
  addr)
    python3 "$helper" wait-accept "$addr" 10 || fail "nothing accepts connections on $addr"
    ;;
esac
say "server ready at $addr (expected outcome: $expect) after $(( $(date +%s) - started )) s of set-up"

if [ "$expect" = redq ]; then
  deselected=("${REDQ_DESELECTED[@]}")
  expected_failures=("${REDQ_EXPECTED_FAILURES[@]}")
else
  deselected=("${EMULATOR_DESELECTED[@]}")
  expected_failures=("${EMULATOR_EXPECTED_FAILURES[@]}")
fi

# 5. pytest.
keyword="not rest"
[ -z "$only" ] || keyword="not rest and ($only)"
pytest_args=("$MODULE" -k "$keyword" -v -rfEs --tb=short
  -p no:cacheprovider --timeout "$PER_TEST_TIMEOUT"
  -o junit_family=xunit2 --junitxml "$tmp/junit.xml")
[ "$flaky" = 1 ] || pytest_args+=(-p no:flaky)
for test_id in "${deselected[@]}"; do pytest_args+=(--deselect "$test_id"); done

host=${addr%:*}
host=${host#[}
host=${host%]}
no_proxy_list="127.0.0.1,localhost,::1,$host${no_proxy:+,$no_proxy}"
# pytest runs in the background so that a signal to this script is handled
# at once (bash runs traps only between foreground commands). A background
# command starts with SIGINT ignored; the wrapper restores Python's handler so
# that timeout's SIGINT stops pytest the way Ctrl-C does (report written).
pytest_status=0
(
  cd "$tmp/run"
  unset KOKORO_GFILE_DIR
  export PUBSUB_EMULATOR_HOST="$addr" GOOGLE_CLOUD_PROJECT="$PROJECT" \
    GOOGLE_APPLICATION_CREDENTIALS="$tmp/fake-credentials.json" \
    no_proxy="$no_proxy_list" NO_PROXY="$no_proxy_list" PYTHONDONTWRITEBYTECODE=1
  exec timeout --foreground -s INT -k 30 "$TOTAL_TIMEOUT" "$tmp/venv/bin/python" -c \
    'import signal, sys, pytest
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.exit(pytest.main(sys.argv[1:]))' "${pytest_args[@]}"
) &
pytest_pid=$!
wait "$pytest_pid" || pytest_status=$?
pytest_pid=""
case "$pytest_status" in
  0|1) ;;
  124) say "pytest was stopped after $TOTAL_TIMEOUT s" ;;
  *) say "pytest exited with status $pytest_status" ;;
esac

# 6. The verdict.
check_args=(check "$tmp/junit.xml" --module "$MODULE" --label "$expect, $mode")
for test_id in "${ALL_TESTS[@]}"; do check_args+=(--all "$test_id"); done
for test_id in "${deselected[@]}"; do check_args+=(--deselected "$test_id"); done
for test_id in "${expected_failures[@]}"; do check_args+=(--fail "$test_id"); done
for test_id in "${SKIPPED_TESTS[@]}"; do check_args+=(--skip "$test_id"); done
[ -z "$only" ] || check_args+=(--subset)
verdict=0
python3 "$helper" "${check_args[@]}" || verdict=$?
say "wall time $(( $(date +%s) - started )) s"
if [ "$verdict" != 0 ]; then
  for log in "$tmp/redq.log" "$tmp/emulator.log"; do
    [ -f "$log" ] || continue
    echo "---- last lines of $(basename "$log")"
    tail -n 40 "$log"
  done
  exit 1
fi
case "$pytest_status" in 0|1) ;; *) exit 1 ;; esac
