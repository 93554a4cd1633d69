#!/usr/bin/env bash
# tools/bench/alternate.sh: two builds of matmul_bench (here two copies of one) run in turn; the
# table has a row per benchmark the filter matched, a "median unit [min-max]" cell per binary whose
# numbers are ordered (min <= median <= max, all positive), and the round count. Bad arguments (a
# missing binary, a round count that is not a number, a filter that matches nothing) are refused
# naming the problem. No timing is compared (that is the benchmark's job, not a test's).
# Usage: bench_alternate.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1 src=$2
source "$(dirname "$0")/lib.bash"
tool="$src/tools/bench/alternate.sh"

cp "$bin/matmul_bench" "$tmp/before"
cp "$bin/matmul_bench" "$tmp/after"
filter='BM_Bf16Widening/rows:(1|4)/in:2048/out:2048'  # every CPU runs it
if MIN_TIME=0.01 bash "$tool" 2 "$filter" "$tmp/before" "$tmp/after" > "$tmp/table" 2> "$tmp/err"; then
  /usr/bin/python3 - "$tmp/table" "$tmp/before" "$tmp/after" > "$tmp/checks" <<'PY' || true
import re, sys
lines = open(sys.argv[1]).read().splitlines()
before, after = sys.argv[2], sys.argv[3]
print(("ok" if lines and lines[0] == f"| benchmark | 1: {before} | 2: {after} |" else "FAIL") + f" header {lines[:1]}")
rows = [l for l in lines if l.startswith("| BM_")]
names = [r.split("|")[1].strip() for r in rows]
want = ["BM_Bf16Widening/rows:1/in:2048/out:2048", "BM_Bf16Widening/rows:4/in:2048/out:2048"]
print(("ok" if names == want else "FAIL") + f" one row per matched benchmark: {names}")
for r in rows:
    for cell in r.strip("|").split("|")[1:]:
        m = re.fullmatch(r"\s*(\d+) (ns|us|ms|s) \[(\d+)-(\d+)\]\s*", cell)
        good = m and 0 < int(m[3]) <= int(m[1]) <= int(m[4])
        print(("ok" if good else "FAIL") + f" a median within its positive range: '{cell.strip()}'")
print(("ok" if "median [range] of 2 alternated rounds" in lines else "FAIL") + " the round count")
PY
  while read -r status rest; do
    if [[ $status == ok ]]; then pass "alternate: $rest"; else fail "alternate: $rest"; fi
  done < "$tmp/checks"
  [[ -s $tmp/checks ]] || fail "alternate: the table's checks printed nothing"
else
  fail "alternate.sh exited with $?: $(tail -3 "$tmp/err")"
fi

expect_error "alternate: a missing binary" "not an executable file: $tmp/nothing" \
  bash "$tool" 1 "$filter" "$tmp/before" "$tmp/nothing"
expect_error "alternate: rounds must be a number" "ROUNDS must be a positive integer, got 'x'" \
  bash "$tool" x "$filter" "$tmp/before" "$tmp/after"
expect_error "alternate: one binary is no comparison" "usage:" bash "$tool" 1 "$filter" "$tmp/before"
expect_error "alternate: a filter that matches nothing" "no benchmark ran that matches the filter" \
  env MIN_TIME=0.01 bash "$tool" 1 'BM_NoSuchBenchmark' "$tmp/before" "$tmp/after"

finish bench_alternate
