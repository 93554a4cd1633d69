#!/usr/bin/env bash
# Crash safety with real processes (tests/python/kill9_test.py): 50 kill -9s at random moments during
# multi-turn load on --durability turn must lose no acknowledged turn and half-apply none; the same
# harness on --durability shutdown must notice lost turns (a control: the check can fail).
# Usage: kill9.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"
harness=(timeout 600 /usr/bin/python3 "$src/tests/python/kill9_test.py" "$bin" "$src")

if "${harness[@]}" --kills 50 > "$tmp/turn.log" 2>&1; then
  pass "$(grep '^kill9: [0-9]' "$tmp/turn.log")"
else
  fail "--durability turn: $(cat "$tmp/turn.log")"
fi
if "${harness[@]}" --kills 2 --durability shutdown > "$tmp/shutdown.log" 2>&1; then
  fail "--durability shutdown lost nothing: the harness cannot see a loss: $(cat "$tmp/shutdown.log")"
elif grep -q "lost" "$tmp/shutdown.log"; then
  pass "control: --durability shutdown loses the sessions a kill -9 finds resident"
else
  fail "control failed for another reason: $(cat "$tmp/shutdown.log")"
fi
finish kill9
