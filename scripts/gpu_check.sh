#!/usr/bin/env bash
# One GPU test binary's tests on a GPU machine, a step of scripts/gpu_session.sh (docs/cuda.md): each
# test in a process of its own, so that one that aborts (a failed check, a kernel fault) cannot hide
# the others; JOBS at a time (default 4: the tests are small beside the GPU); each under a timeout
# that ends by STEP_DEADLINE (epoch seconds, when the session gave one); with synchronous launch
# checks on (STEADY_CUDA_SYNC_CHECK=1), so that a fault names its kernel. On a GPU machine a SKIPPED
# test fails the check: it means the device was not seen. With GPU_DRY_RUN=1 (no GPU: the dry run)
# skips are expected.
#
#   scripts/gpu_check.sh BINARY GTEST_FILTER LOGDIR
#
# Writes LOGDIR/<Suite.Test>.txt per test and LOGDIR/results.tsv (test, result, rc, seconds); prints
# "N passed, S skipped, F failed: ..." last; exit 0 when none failed (and, on a GPU, none skipped and
# at least one passed).
set -uo pipefail
if [[ $# -ne 3 ]]; then
  sed -n '2,/^$/p' "$0" >&2
  exit 2
fi
bin=$1 filter=$2 logdir=$3
mkdir -p "$logdir"
[[ -x $bin ]] || { echo "0 passed, 0 skipped, 1 failed: $bin is missing"; exit 1; }
export STEADY_CUDA_SYNC_CHECK=1
export LOGDIR=$logdir BIN=$bin DEADLINE=${STEP_DEADLINE:-0}
per_test=${TEST_TIMEOUT_S:-240}
export PER_TEST=$per_test

# --gtest_list_tests prints "Suite." lines and indented test names (parameters after a '#').
mapfile -t cases < <("$bin" --gtest_filter="$filter" --gtest_list_tests 2> "$logdir/list.err" |
  awk '/^[^ ]/ {suite = $1; next} {print suite $1}')
if [[ ${#cases[@]} -eq 0 ]]; then
  echo "0 passed, 0 skipped, 1 failed: no tests listed for '$filter' ($(head -c 300 "$logdir/list.err" | tr '\n' ' '))"
  exit 1
fi

run_one() {
  local c=$1 limit=$PER_TEST t0 rc result
  if ((DEADLINE > 0)); then
    local left=$((DEADLINE - $(date +%s)))
    ((left < limit)) && limit=$left
  fi
  local out="$LOGDIR/${c//\//_}.txt"
  if ((limit < 2)); then
    printf '%s\tNOT RUN\t-\t0\n' "$c"
    return
  fi
  t0=$(date +%s)
  timeout -k 5 "$limit" "$BIN" --gtest_filter="$c" > "$out" 2>&1
  rc=$?
  if [[ $rc -eq 0 ]] && grep -q '^\[  SKIPPED \]' "$out"; then
    result=SKIPPED
  elif [[ $rc -eq 0 ]] && grep -q '^\[       OK \]' "$out"; then
    result=PASSED
  elif [[ $rc -eq 124 || $rc -eq 137 ]]; then
    result=TIMEOUT
  else
    result=FAILED
  fi
  printf '%s\t%s\t%s\t%s\n' "$c" "$result" "$rc" "$(($(date +%s) - t0))"
}
export -f run_one
printf '%s\n' "${cases[@]}" | xargs -d '\n' -P "${JOBS:-4}" -I{} bash -c 'run_one "$1"' _ {} > "$logdir/results.tsv"

passed=$(grep -c $'\tPASSED\t' "$logdir/results.tsv")
skipped=$(grep -c $'\tSKIPPED\t' "$logdir/results.tsv")
mapfile -t bad < <(awk -F'\t' '$2 != "PASSED" && $2 != "SKIPPED" {print $1 " (" $2 ", rc " $3 ")"}' "$logdir/results.tsv")
note="$passed passed, $skipped skipped, ${#bad[@]} failed"
((${#bad[@]} > 0)) && note+=": $(printf '%s; ' "${bad[@]:0:8}" | sed 's/; $//')"
((${#bad[@]} > 8)) && note+="; ..."
echo "$note"
((${#bad[@]} == 0)) || exit 1
if [[ ${GPU_DRY_RUN:-0} != 1 ]] && ((skipped > 0 || passed == 0)); then exit 1; fi
exit 0
