#!/usr/bin/env bash
# matmul_bench's issue-rate benchmark and its peak_fraction counter (docs/cpu.md, "VPDPBUSD's issue
# rate, measured in the tree"): on a CPU with AVX512_VNNI every BM_VpdpbusdIssue variant reports a
# positive rate under its label, and an AVX512_VNNI kernel reports a finite, positive share of the
# peak measured in the same process; elsewhere the issue benchmark says why it skipped. The same for
# BM_Vdpbf16psIssue and the bf16 kernel on AVX512_BF16, and for BM_MaddubswIssue and the AVX2 q8
# kernel. No timing is
# compared with another (that is the benchmark's job, not a test's).
# Usage: matmul_bench_counters.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
source "$(dirname "$0")/lib.bash"

"$bin/matmul_bench" --benchmark_filter='BM_VpdpbusdIssue|BM_Vdpbf16psIssue|BM_MaddubswIssue|BM_(Q8Dot/rows:4/in:2048/out:2048/path:(0|2)|Bf16Dot/rows:4/in:2048/out:2048/)' \
  --benchmark_min_time=0.01 --benchmark_format=json > "$tmp/out.json" 2> "$tmp/err" ||
  fail "matmul_bench exited with $?: $(tail -3 "$tmp/err")"

/usr/bin/python3 - "$tmp/out.json" > "$tmp/checks" <<'PY' || true
import json, math, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
issue = [r for r in runs if r["name"].startswith("BM_VpdpbusdIssue")]
dot = [r for r in runs if r["name"].startswith("BM_Q8Dot") and "/path:0/" in r["name"]]

def rate_and_share(issue, kernel, rate_key, macs_key, per, what, kernel_name):
    """An issue loop's positive rate, `per` multiply-adds an instruction, and its kernel's share of it."""
    rate, macs = issue.get(rate_key, 0), issue.get(macs_key, 0)
    ok = rate > 0 and abs(macs - per * rate) <= 1e-6 * macs
    print(("ok" if ok else "FAIL") + f" {what} a second, {per} multiply-adds each: {rate}, {macs}")
    f = kernel.get("peak_fraction")
    print(("ok" if f is not None and math.isfinite(f) and f > 0 else "FAIL") + f" {kernel_name}'s peak_fraction {f}")
labels = {"alone", "+4 VFMADD231PS", "+4 VMULPS", "+4 VPMULLD", "+4 VCVTDQ2PS", "+4 VPSRLW and VPANDD"}
if len(issue) != 6:
    print(f"FAIL six BM_VpdpbusdIssue variants, got {len(issue)}")
elif all(r.get("error_occurred") for r in issue):
    msgs = {r.get("error_message") for r in issue}
    print(("ok" if msgs == {"no AVX512_VNNI on this CPU"} else "FAIL") + f" no AVX512_VNNI here: every variant skipped, {msgs}")
else:
    bad = [r["name"] for r in issue if not (r.get("G_VPDPBUSD_per_s", 0) > 0 and r.get("int8_GMACs", 0) > 0)]
    print(("FAIL" if bad else "ok") + f" every variant reports a positive rate {bad}")
    got = {r.get("label") for r in issue}
    print(("ok" if got == labels else "FAIL") + f" the variants' labels {sorted(got)}")
    macs = [abs(r["int8_GMACs"] - 64 * r["G_VPDPBUSD_per_s"]) <= 1e-6 * r["int8_GMACs"] for r in issue]
    print(("ok" if all(macs) else "FAIL") + " 64 multiply-adds a VPDPBUSD")
    if len(dot) != 1 or dot[0].get("error_occurred"):
        print(f"FAIL the q8 kernel on AVX512_VNNI ran: {dot}")
    else:
        f = dot[0].get("peak_fraction")
        print(("ok" if f is not None and math.isfinite(f) and f > 0 else "FAIL") + f" the q8 kernel's peak_fraction {f}")
# AVX2's products (VPMADDUBSW, VPMADDWD, VPADDD: 32 multiply-adds each) and the AVX2 q8 kernel's share.
avx2 = [r for r in runs if r["name"].startswith("BM_MaddubswIssue")]
avx2_dot = [r for r in runs if r["name"].startswith("BM_Q8Dot") and "/path:2/" in r["name"]]
if len(avx2) != 1 or len(avx2_dot) != 1:
    print(f"FAIL one BM_MaddubswIssue and one AVX2 BM_Q8Dot run, got {len(avx2)} and {len(avx2_dot)}")
elif avx2[0].get("error_occurred"):
    msg = avx2[0].get("error_message")
    print(("ok" if msg == "no AVX2 on this CPU" and avx2_dot[0].get("error_occurred") else "FAIL") + f" no AVX2 here: both skipped ({msg})")
else:
    rate_and_share(avx2[0], avx2_dot[0], "G_products_per_s", "int8_GMACs", 32, "AVX2's products", "the AVX2 q8 kernel")
bf16 = [r for r in runs if r["name"].startswith("BM_Vdpbf16psIssue")]
bf16_dot = [r for r in runs if r["name"].startswith("BM_Bf16Dot")]
if len(bf16) != 1 or len(bf16_dot) != 1:
    print(f"FAIL one BM_Vdpbf16psIssue and one BM_Bf16Dot run, got {len(bf16)} and {len(bf16_dot)}")
elif bf16[0].get("error_occurred"):
    # No AVX512_BF16: the issue loop skips, and the bf16 kernel (skipped, or Arm's) reports no share.
    msg, f = bf16[0].get("error_message"), bf16_dot[0].get("peak_fraction")
    print(("ok" if msg == "no AVX512_BF16 on this CPU" and f is None else "FAIL") +
          f" no AVX512_BF16 here: the issue loop skipped ({msg}), no bf16 peak_fraction ({f})")
else:
    rate_and_share(bf16[0], bf16_dot[0], "G_VDPBF16PS_per_s", "bf16_GMACs", 32, "VDPBF16PS", "the bf16 kernel")
PY
# --threads=N sets the compute threads (the counter says so; the widening kernel runs on every CPU);
# a bad count is refused, naming it.
"$bin/matmul_bench" --threads=1 --benchmark_filter='BM_Bf16Widening/rows:1/in:2048/out:2048/' \
  --benchmark_min_time=0.01 --benchmark_format=json > "$tmp/one.json" 2> "$tmp/err" ||
  fail "matmul_bench --threads=1 exited with $?: $(tail -3 "$tmp/err")"
/usr/bin/python3 - "$tmp/one.json" >> "$tmp/checks" <<'PY' || true
import json, sys
runs = [r for r in json.load(open(sys.argv[1]))["benchmarks"] if not r.get("error_occurred")]
threads = {r.get("threads") for r in runs}
print(("ok" if runs and threads == {1} else "FAIL") + f" --threads=1: every run on one thread {threads}")
PY
for bad in 0 x 2y; do
  if "$bin/matmul_bench" --threads=$bad --benchmark_filter=none > "$tmp/bad.out" 2>&1; then
    echo "FAIL --threads=$bad was accepted" >> "$tmp/checks"
  elif grep -qF -- "--threads: expected an integer in [1, 4096], got \"$bad\"" "$tmp/bad.out"; then
    echo "ok --threads=$bad refused, naming it" >> "$tmp/checks"
  else
    echo "FAIL --threads=$bad: $(head -2 "$tmp/bad.out")" >> "$tmp/checks"
  fi
done

while read -r status rest; do
  if [ "$status" = ok ]; then pass "$rest"; else fail "$rest"; fi
done < "$tmp/checks"
[ -s "$tmp/checks" ] || fail "no checks ran: $(cat "$tmp/out.json" | head -5)"
finish matmul_bench_counters
