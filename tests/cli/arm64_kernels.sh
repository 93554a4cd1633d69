#!/usr/bin/env bash
# The CPU kernels on AArch64 (kernels/cpu, docs/cpu.md "Arm"): kernels/cpu and its two test binaries
# cross-built with Debian's aarch64 compiler (STEADY_KERNELS_ONLY, cmake/aarch64-linux-gnu.cmake) and
# run under qemu-user as three CPUs:
#   max          every extension qemu has (SDOT, BF16, I8MM): the SMMLA, SDOT and BFDOT kernels;
#   neoverse-n1  Graviton 2 / Ampere Altra: SDOT, no BF16 (bf16 widens);
#   cortex-a72   Graviton 1: neither (every int8 format widens).
# Then the int8 kernels' results on this x86-64 machine and on AArch64 must be the same bits
# (CpuDotTest.Int8PathsGiveTheSameBits with STEADY_INT8_RESULTS_OUT / _IN). Emulated: correctness
# only, no timings. Exit 77 (a visible skip) without the cross compiler or qemu.
# Usage: arm64_kernels.sh BIN_DIR SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
source "$(dirname "$0")/lib.bash"

for tool in aarch64-linux-gnu-g++ qemu-aarch64; do
  if ! command -v "$tool" > /dev/null; then
    echo "SKIP: needs $tool (scripts/install-deps.sh installs g++-aarch64-linux-gnu, qemu-user and the arm64 libraries)"
    exit 77
  fi
done

# The cross build lives beside the main one (kept between runs; ccache where there is one).
build=$(cd "$bin/.." && pwd)/arm64
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
if cmake -S "$src" -B "$build" -DCMAKE_TOOLCHAIN_FILE="$src/cmake/aarch64-linux-gnu.cmake" -DSTEADY_KERNELS_ONLY=ON \
     -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" > "$tmp/configure.log" 2>&1 &&
   cmake --build "$build" -j 2 > "$tmp/build.log" 2>&1; then
  pass "kernels/cpu and its tests cross-build for AArch64"
else
  tail -n 40 "$tmp/configure.log" "$tmp/build.log"
  fail "kernels/cpu and its tests cross-build for AArch64"
  finish arm64_kernels
  exit
fi

# run_tests CPU BINARY EXPECT...: BINARY under qemu as CPU passes, and its output has every EXPECT.
run_tests() {
  local cpu=$1 test=$2 log="$tmp/$1-$2.log"
  shift 2
  if ! qemu-aarch64 -cpu "$cpu" "$build/bin/$test" > "$log" 2>&1; then
    grep -E "Failure|FAILED|Expected|Which is|value" "$log" | head -20
    fail "$test on $cpu"
    return
  fi
  local missing=""
  for want in "$@"; do grep -qF -- "$want" "$log" || missing+=" '$want'"; done
  if [ -n "$missing" ]; then
    fail "$test on $cpu: output lacks$missing"
  else
    local passed skipped
    passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\{0,1\}\..*/\1/p' "$log")
    skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\},.*/\1/p' "$log")
    pass "$test on $cpu (${passed:-0} passed, ${skipped:-0} skipped)"
  fi
}
for cpu in max neoverse-n1 cortex-a72; do run_tests "$cpu" cpu_kernels_test; done
run_tests max cpu_dot_test "int8 path: arm_i8mm (SMMLA)" "int8 path: arm_dotprod (SDOT)" "bf16 path: arm_bf16 (BFMMLA, BFDOT)"
run_tests neoverse-n1 cpu_dot_test "int8 path: arm_dotprod (SDOT)"
run_tests cortex-a72 cpu_dot_test "no Arm dot-product extension (SDOT) on this CPU" "no Arm BF16 extension (BFDOT, BFMMLA) on this CPU"

# The same inputs through this machine's widest int8 path and through SMMLA (every int8 format; SDOT for
# one row), which the test itself compares with SDOT: the same bits.
filter=--gtest_filter=CpuDotTest.Int8PathsGiveTheSameBits
if STEADY_INT8_RESULTS_OUT="$tmp/x86.f32" "$bin/cpu_dot_test" "$filter" > "$tmp/native.log" 2>&1 && [ -s "$tmp/x86.f32" ]; then
  native=$(sed -n 's/^int8 results: //p' "$tmp/native.log")
  if STEADY_INT8_RESULTS_IN="$tmp/x86.f32" qemu-aarch64 -cpu max "$build/bin/cpu_dot_test" "$filter" > "$tmp/cross.log" 2>&1 &&
     grep -q "equal .* bit for bit" "$tmp/cross.log"; then
    pass "AArch64 SMMLA and SDOT give x86-64's int8 results bit for bit ($native)"
  else
    grep -E "Failure|value|Expected" "$tmp/cross.log" | head
    fail "AArch64 SMMLA and SDOT against x86-64's int8 results ($native)"
  fi
else
  echo "note: no int8 kernel on this x86-64 CPU (or its test failed: $(tail -3 "$tmp/native.log")): nothing to compare across machines"
fi
finish arm64_kernels
