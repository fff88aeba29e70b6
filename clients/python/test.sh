#!/usr/bin/env bash
# Tests of the redq Python client against the redq at $REDQ_ADDR (required):
# installs the package into clients/python/.venv (pip install ./clients/python,
# which generates the stubs from proto/), runs the unittest suite, then the
# benchmark's smoke run. Exits non-zero on any failure.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
: "${REDQ_ADDR:?set REDQ_ADDR=host:port of a running redq}"
python="${PYTHON:-python3}"
venv="$here/.venv"

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
cd "$root"
rm -rf "$here/build"  # setuptools' in-place build dir: stale files there would go into the wheel
"$venv/bin/python" -m pip install -q --disable-pip-version-check ./clients/python
# Import from the installed package, not from the source folder.
cd "$here/tests"
"$venv/bin/python" -c 'import redq, sys; assert "site-packages" in redq.__file__, redq.__file__'

echo "=== unit tests against $REDQ_ADDR"
"$venv/bin/python" -m unittest discover -s "$here/tests" -v

echo "=== benchmark smoke run"
"$venv/bin/python" "$here/bench/bench.py" --quick
