#!/usr/bin/env bash
# The dashboard's browser tests: builds redq, installs the pinned
# playwright-core (npm ci; it never downloads a browser) and drives Debian's
# chromium against a live server. Screenshots land in
# target/browser-screenshots/ (kept by CI).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null; then
  echo "browser-tests: chromium is missing (apt-get install -y chromium)" >&2
  exit 1
fi
command -v redis-server >/dev/null || { echo "browser-tests: redis-server is missing" >&2; exit 1; }

cargo build --locked --quiet --bin redq
export REDQ_BIN="$PWD/target/debug/redq"
export SCREENSHOT_DIR="$PWD/target/browser-screenshots"
export CHROMIUM="$(command -v chromium)"
# playwright-core has no browser download step; this keeps any other tool quiet too.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

cd tests/browser
npm ci --no-audit --no-fund --silent
npm test
