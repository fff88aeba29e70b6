#!/usr/bin/env bash
# Installs the official Pub/Sub clients' dependencies and runs the example programs
# against the Pub/Sub v1 server at $PUBSUB_EMULATOR_HOST (redq or Google's emulator).
#
#   PUBSUB_EMULATOR_HOST=127.0.0.1:50051 clients/pubsub/test.sh [--no-install] [python|node ...]
#   clients/pubsub/test.sh --install-only [python|node ...]
#
# The project is $GOOGLE_CLOUD_PROJECT (default "demo"). Each program's JSON goes to
# stdout, or with PUBSUB_OUT=DIR to DIR/<language>.json, beside <language>.log (its
# stderr), <language>.status (its exit status) and <language>.ms (its run time):
# scripts/pubsub-differential.sh reads those. Ends with a "N passed, N failed" line;
# exits 1 if any program failed.
#
# Python runs in its own virtualenv ($PUBSUB_VENV, default clients/pubsub/.venv):
# google-cloud-pubsub 2.35 needs protobuf < 7 while redq's own Python client needs
# protobuf >= 7.35, so the two cannot share the system interpreter's site-packages.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

install=1
run=1
languages=()
for arg in "$@"; do
  case "$arg" in
    --no-install) install=0 ;;
    --install-only) run=0 ;;
    python|node) languages+=("$arg") ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown argument $arg (want --no-install, --install-only, python or node)" >&2; exit 2 ;;
  esac
done
[ ${#languages[@]} -gt 0 ] || languages=(python node)

if [ "$run" = 1 ] && [ -z "${PUBSUB_EMULATOR_HOST:-}" ]; then
  echo "test.sh: set PUBSUB_EMULATOR_HOST=host:port (redq: cargo run --release -- dev serves 127.0.0.1:50051)" >&2
  exit 2
fi
export GOOGLE_CLOUD_PROJECT=${GOOGLE_CLOUD_PROJECT:-demo}
venv=${PUBSUB_VENV:-$here/.venv}

for language in "${languages[@]}"; do
  [ "$install" = 1 ] || continue
  case "$language" in
    python)
      [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
      "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/python/requirements.txt"
      ;;
    node)
      (cd "$here/node" && npm ci --silent --no-audit --no-fund >/dev/null)
      ;;
  esac
done

[ "$run" = 1 ] || exit 0

passed=0
failed=0
for language in "${languages[@]}"; do
  case "$language" in
    python) program=("$venv/bin/python" "$here/python/example.py" "$GOOGLE_CLOUD_PROJECT") ;;
    node) program=(node "$here/node/example.mjs" "$GOOGLE_CLOUD_PROJECT") ;;
  esac
  echo "pubsub: $language against $PUBSUB_EMULATOR_HOST (project $GOOGLE_CLOUD_PROJECT)" >&2
  start=${EPOCHREALTIME/./}
  status=0
  # Each program bounds its own run; timeout is the last resort (--foreground keeps the
  # program in this process group, which scripts/pubsub-differential.sh stops as one).
  if [ -n "${PUBSUB_OUT:-}" ]; then
    mkdir -p "$PUBSUB_OUT"
    timeout --foreground -k 5 90 "${program[@]}" > "$PUBSUB_OUT/$language.json" 2> >(tee "$PUBSUB_OUT/$language.log" >&2) \
      || status=$?
  else
    timeout --foreground -k 5 90 "${program[@]}" || status=$?
  fi
  ms=$(( (${EPOCHREALTIME/./} - start) / 1000 ))
  if [ -n "${PUBSUB_OUT:-}" ]; then
    echo "$status" > "$PUBSUB_OUT/$language.status"
    echo "$ms" > "$PUBSUB_OUT/$language.ms"
  fi
  took="$((ms / 1000)).$((ms % 1000 / 100)) s"
  if [ "$status" = 0 ]; then
    echo "pubsub: $language ok ($took)" >&2
    passed=$((passed + 1))
  else
    echo "pubsub: $language FAILED (exit $status, $took)" >&2
    failed=$((failed + 1))
  fi
done

echo "pubsub: $passed passed, $failed failed"
[ "$failed" = 0 ]
