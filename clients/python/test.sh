#!/usr/bin/env bash
# Tests of the redq Python client against the redq at $REDQ_ADDR (required).
# Builds the wheel (the gRPC stubs are committed in redq/v1/: building needs
# setuptools only), installs it with the `dev` extra into clients/python/.venv,
# then checks, in order:
#   - the committed stubs are what generate.py writes from proto/ (no drift);
#   - mypy: the package, and tests/package/wheel_smoke.py --strict against the
#     installed wheel (so its py.typed and type hints are what a user gets);
#   - the wheel in a FRESH virtual environment outside the repository, without
#     grpcio-tools: redq/py.typed is installed, wheel_smoke.py publishes and
#     receives through it, and importing redq (the wheel's, and the source
#     tree's) writes nothing under an empty $HOME;
#   - the unittest suite, then the benchmark's smoke run, on the installed wheel.
# Exits non-zero on any failure.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
: "${REDQ_ADDR:?set REDQ_ADDR=host:port of a running redq}"
python="${PYTHON:-python3}"
venv="$here/.venv"
scratch="$(mktemp -d)"  # outside the repository: the wheel, the fresh venv, an empty HOME
trap 'rm -rf "$scratch"' EXIT
pip_quiet=(-q --disable-pip-version-check)

echo "=== build the wheel"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
rm -rf "$here/build"  # setuptools' in-place build dir: stale files there would go into the wheel
"$venv/bin/python" -m pip wheel "${pip_quiet[@]}" --no-deps -w "$scratch/dist" "$here"
wheel=$(echo "$scratch"/dist/redq-*.whl)
[ -f "$wheel" ] || { echo "FAIL: no wheel built"; exit 1; }
echo "built $(basename "$wheel")"
# Its dependencies and the dev extra (grpcio-tools for generate.py, mypy), then the wheel itself
# (the version does not change between builds: without --force-reinstall pip would keep an older one).
"$venv/bin/python" -m pip install "${pip_quiet[@]}" "$wheel[dev]"
"$venv/bin/python" -m pip install "${pip_quiet[@]}" --no-deps --force-reinstall "$wheel"

echo "=== the committed stubs are what generate.py writes"
"$venv/bin/python" "$here/generate.py" --check

echo "=== types: mypy on the package, and --strict on a user's script against the installed wheel"
(cd "$here" && "$venv/bin/mypy" --cache-dir "$scratch/mypy-package")
# From the scratch directory, with no config: mypy finds redq in the venv's site-packages only.
(cd "$scratch" && "$venv/bin/mypy" --strict --cache-dir "$scratch/mypy-user" "$here/tests/package/wheel_smoke.py")

echo "=== the wheel in a fresh virtual environment, without grpcio-tools"
fresh="$scratch/venv"
"$python" -m venv "$fresh"
"$fresh/bin/python" -m pip install "${pip_quiet[@]}" "$wheel"
if "$fresh/bin/python" -c 'import grpc_tools' 2>/dev/null; then
  echo "FAIL: grpcio-tools is installed in the fresh venv: the wheel must not need it"; exit 1
fi
home="$scratch/home"
mkdir "$home"
(cd "$scratch" && HOME="$home" timeout 120 "$fresh/bin/python" "$here/tests/package/wheel_smoke.py")
# The source tree imports without generating anything, nor grpcio-tools (client.py runs this way).
(cd "$scratch" && HOME="$home" PYTHONPATH="$here" PYTHONDONTWRITEBYTECODE=1 "$fresh/bin/python" -c '
import sys, redq
assert redq.__file__ == sys.argv[1], redq.__file__
assert redq.queue_pb2.PublishMessage(payload=b"x").payload == b"x"
print("source tree: redq and its stubs import from", redq.__file__)' "$here/redq/__init__.py")
if [ -n "$(ls -A "$home")" ]; then
  echo "FAIL: importing and using redq wrote under HOME:"; find "$home"; exit 1
fi
echo "HOME stayed empty"

echo "=== unit tests against $REDQ_ADDR"
# Import from the installed package, not from the source folder.
cd "$here/tests"
"$venv/bin/python" -c 'import redq, sys; assert "site-packages" in redq.__file__, redq.__file__'
"$venv/bin/python" -m unittest discover -s "$here/tests" -v

echo "=== benchmark smoke run"
"$venv/bin/python" "$here/bench/bench.py" --quick
