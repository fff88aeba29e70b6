#!/usr/bin/env bash
# Fuzzes redq's request validation and parsers with cargo-fuzz (libFuzzer):
# builds the targets of fuzz/ once, runs each for SECONDS (default 60) from
# the checked-in seeds in fuzz/seeds/<target>/ (plus what earlier runs left
# in fuzz/corpus/<target>/), and fails if any target finds a crash (a panic,
# a timeout or an out-of-memory), whose input is left in
# fuzz/artifacts/<target>/. Takes about targets × SECONDS plus the build.
#
#   scripts/fuzz.sh [SECONDS]
#
# Environment:
#   CARGO_TARGET_DIR  build directory (default /tmp/fuzz-target)
#   FUZZ_TARGETS      targets to run, space-separated (default: all of them)
#   FUZZ_JOBS         cargo build jobs (default 1)
#   FUZZ_LOG_DIR      where each target's libFuzzer log goes (default: a temp dir)
#
# Needs only the stable toolchain: RUSTC_BOOTSTRAP=1 lets cargo-fuzz pass its
# nightly flags. Installs cargo-fuzz from crates.io when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=${1:-60}
if ! [[ $duration =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/fuzz.sh [SECONDS]  (SECONDS: a positive whole number)" >&2
  exit 2
fi

export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/tmp/fuzz-target}
export CARGO_BUILD_JOBS=${FUZZ_JOBS:-1}
targets=(${FUZZ_TARGETS:-requests ack_ids tokens_file patterns entry_ids})
log_dir=${FUZZ_LOG_DIR:-$(mktemp -d -t redq-fuzz.XXXXXX)}
mkdir -p "$log_dir"

if ! cargo fuzz --help >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

# Debug assertions and overflow checks on, as in tests.
build_flags=(-a)
# The AdminService validators need `redq::grpc::admin` to be public.
if grep -Eq '^[[:space:]]*pub mod admin;' src/grpc/mod.rs; then
  build_flags+=(--features admin)
else
  echo "== redq::grpc::admin is private: the requests target fuzzes the admin requests without its validators"
fi

echo "== building ${targets[*]} (${build_flags[*]})"
build_start=$(date +%s)
(cd fuzz && for target in "${targets[@]}"; do cargo fuzz build "${build_flags[@]}" "$target"; done)
echo "== built in $(($(date +%s) - build_start)) s"

failed=()
summary=()
for target in "${targets[@]}"; do
  seeds=fuzz/seeds/$target
  corpus=fuzz/corpus/$target
  mkdir -p "$corpus" "fuzz/artifacts/$target"
  log=$log_dir/$target.log
  echo "== fuzzing $target for ${duration} s (log: $log)"
  corpora=("$PWD/$corpus")
  [[ -d $seeds ]] && corpora+=("$PWD/$seeds")
  status=0
  (cd fuzz && cargo fuzz run "${build_flags[@]}" "$target" "${corpora[@]}" -- \
    -max_total_time="$duration" -timeout=10 -print_final_stats=1) >"$log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  if [[ -z $execs ]]; then
    # No final stats (the run stopped at a crash): the last `#N` line.
    execs=$(grep -oE '^#[0-9]+' "$log" | tail -n 1 | tr -d '#')
  fi
  if ((status == 0)); then
    result=ok
  else
    result="FAILED (exit $status)"
    failed+=("$target")
    grep -E -A1 'panicked at' "$log" | head -n 10 || true
    grep -E 'ERROR: libFuzzer|Test unit written to|Base64:' "$log" | head -n 10 || true
    tail -n 5 "$log"
  fi
  summary+=("$(printf '%-12s %12s executions  %s' "$target" "${execs:-?}" "$result")")
done

echo "== summary (${duration} s per target)"
printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "== findings in: ${failed[*]} (inputs in fuzz/artifacts/<target>/; reproduce with" \
    "cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run -a <target> <artifact>)" >&2
  exit 1
fi
echo "== no crash found"
