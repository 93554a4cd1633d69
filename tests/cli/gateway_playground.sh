#!/usr/bin/env bash
# The web playground steady-gateway serves at / (clients/gateway/playground), in Debian's headless
# Chromium (tests/browser/playground_test.py): loads the page, chats in a session, waits for the
# streamed replies, forks, and saves a screenshot. Serves the shipped default model as the demo does.
# Exit 77 (a visible skip) without chromium or python3-websocket (scripts/install-deps.sh).
# Usage: gateway_playground.sh BIN_DIR SOURCE_DIR [SCREENSHOT.png]
#   The committed docs/img/playground.png comes from:
#   bash tests/cli/gateway_playground.sh build/bin . docs/img/playground.png
set -euo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"
screenshot=${3:-$tmp/playground.png}
serve_gateway "$bin" "$src/models/tiny-softmax" --mechanism taylor --order 3 --state-memory 64M
rc=0
timeout 300 /usr/bin/python3 "$src/tests/browser/playground_test.py" "$url/" "$screenshot" || rc=$?
[ "$rc" -eq 77 ] && exit 77
[ "$rc" -eq 0 ] && pass "the playground in headless Chromium (above)" || fail "the playground in headless Chromium (above)"
finish gateway_playground
