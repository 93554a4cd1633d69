#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every test (GPU tests skip without a GPU).
# Every test removes what it creates, files and processes alike, also when it fails: the tests run
# with TMPDIR in a fresh directory, and anything left there or still running from build/bin
# afterwards fails the suite (and is removed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
status=0
TMPDIR=$scratch ctest -j"$(nproc)" --output-on-failure --timeout 900 || status=$?
if [ -n "$(ls -A "$scratch")" ]; then
  echo "test.sh: the tests left files in their TMPDIR:" >&2
  ls -A "$scratch" | head -20 >&2
  status=1
fi
# Ours, and anything started on the tests' files (redis-server --dir, nginx -c under TMPDIR).
if pgrep -f "$PWD/bin/|$scratch" > /dev/null; then
  echo "test.sh: processes the tests started are still running:" >&2
  pgrep -af "$PWD/bin/|$scratch" >&2
  pkill -KILL -f "$PWD/bin/|$scratch" || true
  status=1
fi
exit $status
