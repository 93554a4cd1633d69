#!/usr/bin/env bash
# First thing to run on a machine with an NVIDIA GPU (docs/cuda.md): build with the CUDA backend
# forced on, run the CUDA op tests (which must PASS here, not skip), run them again under
# compute-sanitizer memcheck, and print a short table.
#
#   scripts/gpu_check.sh [build-dir]      (default: build-gpu)
#
# The full configure needs Debian's absl, gRPC, GTest, OpenBLAS and sentencepiece packages, which a
# lent GPU machine's image may lack. Then build cuda_ops_test on a machine that has them (it links
# only the CUDA libraries, OpenBLAS and libstdc++), carry it, and point this script at it:
#   CUDA_OPS_TEST=path/to/cuda_ops_test scripts/gpu_check.sh
# (with LD_LIBRARY_PATH naming a folder holding the carried libopenblas.so.0, libgfortran.so.5 and
# libquadmath.so.0 when the image has none); the build and full-suite steps are then skipped.
#
# Exit status: 0 when every step passed, 1 otherwise.
set -uo pipefail

cd "$(dirname "$0")/.."
BUILD=${1:-build-gpu}
JOBS=${JOBS:-$(nproc)}
LOG=$BUILD/gpu_check
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH=$CUDA_HOME/bin:$PATH

declare -a STEPS=() RESULTS=() NOTES=()
record() { STEPS+=("$1"); RESULTS+=("$2"); NOTES+=("$3"); }

mkdir -p "$LOG"

# 0. The device, as the driver sees it.
if nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$LOG/nvidia-smi.txt" 2>&1; then
  record "nvidia-smi" PASS "$(head -n1 "$LOG/nvidia-smi.txt")"
else
  record "nvidia-smi" FAIL "no driver or no device (see $LOG/nvidia-smi.txt)"
fi

# 1. Configure and build with CUDA required (fails loudly when nvcc is missing).
PREBUILT=${CUDA_OPS_TEST:-}
if [[ -n $PREBUILT ]]; then
  record "build" SKIP "prebuilt $PREBUILT"
elif cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DENABLE_CUDA=ON -DSTEADY_BUILD_BENCHMARKS=OFF \
     >"$LOG/configure.txt" 2>&1 &&
   cmake --build "$BUILD" -j"$JOBS" --target cuda_ops_test >"$LOG/build.txt" 2>&1; then
  record "build (ENABLE_CUDA=ON)" PASS "$BUILD/bin/cuda_ops_test"
else
  record "build (ENABLE_CUDA=ON)" FAIL "see $LOG/configure.txt, $LOG/build.txt"
fi

BIN=${PREBUILT:-$BUILD/bin/cuda_ops_test}
# 2. The CUDA op tests: on a GPU machine a SKIPPED test is a failure of this check.
if [[ -x $BIN ]]; then
  "$BIN" >"$LOG/tests.txt" 2>&1
  rc=$?
  passed=$(grep -c '^\[       OK \]' "$LOG/tests.txt")
  skipped=$(grep -c '^\[  SKIPPED \]' "$LOG/tests.txt")
  failed=$(grep -c '^\[  FAILED  \]' "$LOG/tests.txt")
  if [[ $rc -eq 0 && $skipped -eq 0 && $passed -gt 0 ]]; then
    record "cuda_ops_test" PASS "$passed passed"
  else
    record "cuda_ops_test" FAIL "rc $rc, $passed passed, $skipped skipped, $failed failed lines (see $LOG/tests.txt)"
  fi
else
  record "cuda_ops_test" FAIL "not built"
fi

# 3. The same under compute-sanitizer memcheck (out-of-bounds and misaligned accesses, leaks).
if [[ -x $BIN ]] && command -v compute-sanitizer >/dev/null; then
  if compute-sanitizer --tool memcheck --leak-check full --error-exitcode 99 "$BIN" \
       >"$LOG/memcheck.txt" 2>&1; then
    record "memcheck" PASS "$(grep -m1 'ERROR SUMMARY' "$LOG/memcheck.txt")"
  else
    record "memcheck" FAIL "$(grep -m1 'ERROR SUMMARY' "$LOG/memcheck.txt") (see $LOG/memcheck.txt)"
  fi
else
  record "memcheck" FAIL "no binary or no compute-sanitizer on PATH"
fi

# 4. The rest of the suite still passes with CUDA built in.
if [[ -z $PREBUILT && -x $BIN ]]; then
  if cmake --build "$BUILD" -j"$JOBS" >>"$LOG/build.txt" 2>&1 &&
     ctest --test-dir "$BUILD" -j"$JOBS" --output-on-failure >"$LOG/ctest.txt" 2>&1; then
    record "ctest (full suite)" PASS "$(grep -m1 'tests passed' "$LOG/ctest.txt")"
  else
    record "ctest (full suite)" FAIL "$(grep -m1 'tests passed\|tests failed' "$LOG/ctest.txt") (see $LOG/ctest.txt)"
  fi
fi

status=0
printf '\n%-24s %-6s %s\n' STEP RESULT NOTE
printf '%-24s %-6s %s\n' ------------------------ ------ ----
for i in "${!STEPS[@]}"; do
  printf '%-24s %-6s %s\n' "${STEPS[$i]}" "${RESULTS[$i]}" "${NOTES[$i]}"
  [[ ${RESULTS[$i]} == PASS || ${RESULTS[$i]} == SKIP ]] || status=1
done
printf '\nlogs: %s\n' "$LOG"
exit $status
