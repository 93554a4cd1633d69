#!/usr/bin/env bash
# Instructions per decode step at 1K and 1M tokens of context for every constant-state mechanism,
# counted by callgrind (repeatable, unlike times on a shared machine).
# Usage: tools/bench/step_instructions.sh [BIN_DIR] [STEPS]
set -euo pipefail
bin=${1:-build/bin}
steps=${2:-10}
echo "| mechanism | instructions/step at 1K | at 1M | 1M / 1K |"
echo "|---|---|---|---|"
for spec in 1 2 3 4 5 6 7; do
  declare -A ir=()
  name=""
  for context in 1024 1048576; do
    out=$(valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/dev/null \
      "$bin/step_instructions" "$spec" "$context" "$steps" 2>&1)
    name=$(echo "$out" | grep -v '^==' | tail -1)
    ir[$context]=$(echo "$out" | sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
  done
  python3 -c "a, b, n = ${ir[1024]}, ${ir[1048576]}, $steps; print('| $name | %d | %d | %.4f |' % (a // n, b // n, b / a))"
done
