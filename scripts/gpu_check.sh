#!/usr/bin/env bash
# First thing to run on a machine with an NVIDIA GPU (docs/cuda.md): build with the CUDA backend
# forced on, run the GPU tests (cuda_ops_test: every op against kernels/cpu; backend_test's CUDA
# cases: the whole model on the CUDA backend against the CPU backend), which must PASS here, not
# skip, then the same under compute-sanitizer memcheck, then the full suite, and print a table.
#
#   scripts/gpu_check.sh [build-dir]      (default: build-gpu)
#
# The full configure needs Debian's absl, gRPC, GTest, OpenBLAS and sentencepiece packages, which a
# lent GPU machine's image lacks. Then build on a project machine and carry the binaries with their
# libraries: scripts/gpu_bundle.sh writes gpu-bundle/ (bin/ and lib/), and
#   BUNDLE=gpu-bundle scripts/gpu_check.sh
# runs the tests from there (LD_LIBRARY_PATH=gpu-bundle/lib); the build and full-suite steps are
# then skipped.
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
PREBUILT=${BUNDLE:-}
if [[ -n $PREBUILT ]]; then
  record "build" SKIP "prebuilt binaries in $PREBUILT"
  BINDIR=$PREBUILT/bin
  export LD_LIBRARY_PATH=$PREBUILT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
elif cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DENABLE_CUDA=ON -DSTEADY_BUILD_BENCHMARKS=OFF \
     >"$LOG/configure.txt" 2>&1 &&
   cmake --build "$BUILD" -j"$JOBS" --target cuda_ops_test backend_test engine_test steady >"$LOG/build.txt" 2>&1; then
  record "build (ENABLE_CUDA=ON)" PASS "$BUILD/bin"
  BINDIR=$BUILD/bin
else
  record "build (ENABLE_CUDA=ON)" FAIL "see $LOG/configure.txt, $LOG/build.txt"
  BINDIR=$BUILD/bin
fi

# The GPU tests: a binary and its gtest filter (backend_test's CUDA cases only).
declare -a TESTS=("cuda_ops_test:*" "backend_test:*Cuda*" "engine_test:*Cuda*")

# 2. The GPU tests: on a GPU machine a SKIPPED test is a failure of this check. Each test runs in
# a process of its own, so one that aborts (a failed check, a CUDA error) cannot hide the others;
# every test's output is kept in $LOG/<binary>/<test>.txt.
for entry in "${TESTS[@]}"; do
  name=${entry%%:*} filter=${entry#*:} bin=$BINDIR/${entry%%:*}
  if [[ ! -x $bin ]]; then
    record "$name" FAIL "not built"
    continue
  fi
  mkdir -p "$LOG/$name"
  # --gtest_list_tests prints "Suite." lines and indented test names (parameters after a '#').
  mapfile -t cases < <("$bin" --gtest_filter="$filter" --gtest_list_tests |
    awk '/^[^ ]/ {suite = $1; next} {print suite $1}')
  passed=0 skipped=0 bad=()
  for c in "${cases[@]}"; do
    out="$LOG/$name/${c//\//_}.txt"
    timeout 300 "$bin" --gtest_filter="$c" >"$out" 2>&1
    rc=$?
    if [[ $rc -eq 0 ]] && grep -q '^\[  SKIPPED \]' "$out"; then
      skipped=$((skipped + 1))
    elif [[ $rc -eq 0 ]] && grep -q '^\[       OK \]' "$out"; then
      passed=$((passed + 1))
    else
      bad+=("$c (rc $rc)")
    fi
  done
  if [[ ${#bad[@]} -eq 0 && $skipped -eq 0 && $passed -gt 0 ]]; then
    record "$name" PASS "$passed passed"
  else
    record "$name" FAIL "$passed passed, $skipped skipped, ${#bad[@]} failed: ${bad[*]:0:6}"
  fi
done

# 3. The same under compute-sanitizer memcheck (out-of-bounds and misaligned accesses, leaks).
for entry in "${TESTS[@]}"; do
  name=${entry%%:*} filter=${entry#*:} bin=$BINDIR/${entry%%:*}
  if [[ -x $bin ]] && command -v compute-sanitizer >/dev/null; then
    if compute-sanitizer --tool memcheck --leak-check full --error-exitcode 99 "$bin" --gtest_filter="$filter" \
         >"$LOG/memcheck-$name.txt" 2>&1; then
      record "memcheck $name" PASS "$(grep -m1 'ERROR SUMMARY' "$LOG/memcheck-$name.txt")"
    else
      record "memcheck $name" FAIL "$(grep -m1 'ERROR SUMMARY' "$LOG/memcheck-$name.txt") (see $LOG/memcheck-$name.txt)"
    fi
  else
    record "memcheck $name" FAIL "no binary or no compute-sanitizer on PATH"
  fi
done

# 4. The rest of the suite still passes with CUDA built in.
if [[ -z $PREBUILT && -x $BINDIR/backend_test ]]; then
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
