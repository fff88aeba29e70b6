#!/usr/bin/env bash
# Tests of the Node.js library against the redq server at $REDQ_ADDR, then the
# package as users get it (proto/ equal to the repository's; the tarball of
# `npm pack` installed in an empty directory outside the repository, where
# test-support/package-check.mjs publishes and receives through it), then a
# smoke run of the benchmarks (bench/bench.js --quick) and, when NATS
# (127.0.0.1:4222) and RabbitMQ (127.0.0.1:5672) answer, of the comparison
# with them (bench/peers/compare.js --quick): answer by their protocols
# (test-support/peers.js), not just an open port, which another program may
# hold. Every server the tests start listens on a port the system picks
# (port 0), read back from its log. Installs the dependencies (npm
# ci) only when node_modules is missing. $REDQ_PIDS (redq,redis-server) adds
# the server's CPU to the figures. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")"

if [ -z "${REDQ_ADDR:-}" ]; then
  echo "test.sh: set REDQ_ADDR=host:port of a running redq" >&2
  exit 2
fi
if [ ! -d node_modules ]; then
  npm ci --no-audit --no-fund
fi

echo "=== node --test (server $REDQ_ADDR)"
# The spec reporter prints each test and the summary (tests, pass, fail).
timeout 120 node --test --test-reporter=spec test/

echo "=== the package: npm pack, installed in an empty directory outside the repository, publishes and receives"
node scripts/sync-protos.js --check
pack=$(mktemp -d)
trap 'rm -rf "$pack"' EXIT
case "$pack/" in "$(cd ../.. && pwd)/"*)
  echo "test.sh: $pack is inside the repository (TMPDIR?); the check needs a directory outside it" >&2
  exit 1
esac
npm pack --silent --pack-destination "$pack" >/dev/null
tarball=$(echo "$pack"/redq-*.tgz)
echo "$(basename "$tarball"):" $(tar -tzf "$tarball" | sed 's|^package/||' | sort)
mkdir "$pack/app"
echo '{ "name": "redq-package-check", "private": true }' >"$pack/app/package.json"
cp test-support/package-check.mjs "$pack/app/"
# The dependencies come from the npm cache (filled by npm ci) when they are there.
(cd "$pack/app" && npm install --silent --prefer-offline --no-audit --no-fund "$tarball" &&
  timeout 60 node package-check.mjs)

echo "=== bench/bench.js --quick"
pids=()
[ -n "${REDQ_PIDS:-}" ] && pids=(--pids "$REDQ_PIDS")
timeout 60 node bench/bench.js --quick "${pids[@]}"

if node test-support/peers.js; then
  echo "=== bench/peers/compare.js --quick (redq beside JetStream and RabbitMQ)"
  [ -d bench/peers/node_modules ] || (cd bench/peers && npm ci --no-audit --no-fund)
  timeout 180 node bench/peers/compare.js --quick --rounds 1 "${pids[@]}"
else
  echo "=== bench/peers/compare.js: skipped (see above)"
fi
