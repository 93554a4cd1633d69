#!/usr/bin/env bash
# matmul_bench's issue-rate benchmark and its peak_fraction counter (docs/cpu.md, "VPDPBUSD's issue
# rate, measured in the tree"): on a CPU with AVX512_VNNI every BM_VpdpbusdIssue variant reports a
# positive rate under its label, and an AVX512_VNNI kernel reports a finite, positive share of the
# peak measured in the same process; elsewhere the issue benchmark says why it skipped. The same for
# BM_Vdpbf16psIssue and the bf16 kernel on AVX512_BF16, for BM_MaddubswIssue and the AVX2 q8 kernel,
# and for BM_FmaIssue and the AVX2 bf16 kernel. No timing is
# compared with another (that is the benchmark's job, not a test's).
# Usage: matmul_bench_counters.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
source "$(dirname "$0")/lib.bash"

"$bin/matmul_bench" --benchmark_filter='BM_VpdpbusdIssue|BM_Vdpbf16psIssue|BM_MaddubswIssue|BM_FmaIssue|BM_(Q8Dot|Bf16Dot)/rows:4/in:2048/out:2048/path:(0|1|2)/' \
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
def issue_and_kernel(issue_name, kernel_name, path, missing, rate_key, macs_key, per, what, kernel_what):
    """An issue loop and its kernel on `path`: both skipped for want of the instructions (`missing`),
    or the loop's rate and the kernel's share of it."""
    issue = [r for r in runs if r["name"].startswith(issue_name)]
    kernel = [r for r in runs if r["name"].startswith(kernel_name) and f"/path:{path}/" in r["name"]]
    if len(issue) != 1 or len(kernel) != 1:
        print(f"FAIL one {issue_name} and one {kernel_name} path:{path} run, got {len(issue)} and {len(kernel)}")
    elif issue[0].get("error_occurred"):
        msg = issue[0].get("error_message")
        skipped = msg == missing and kernel[0].get("error_occurred") and kernel[0].get("peak_fraction") is None
        print(("ok" if skipped else "FAIL") + f" {missing}: {issue_name} and {kernel_what} skipped ({msg})")
    else:
        rate_and_share(issue[0], kernel[0], rate_key, macs_key, per, what, kernel_what)
# AVX2's products (VPMADDUBSW, VPMADDWD, VPADDD: 32 multiply-adds each) and the AVX2 q8 kernel's share;
# VDPBF16PS and the AVX512_BF16 kernel's; 256-bit FMAs (8 multiply-adds each) and the AVX2 bf16 kernel's.
issue_and_kernel("BM_MaddubswIssue", "BM_Q8Dot", 2, "no AVX2 on this CPU", "G_products_per_s", "int8_GMACs", 32,
                 "AVX2's products", "the AVX2 q8 kernel")
issue_and_kernel("BM_Vdpbf16psIssue", "BM_Bf16Dot", 0, "no AVX512_BF16 on this CPU", "G_VDPBF16PS_per_s", "bf16_GMACs", 32,
                 "VDPBF16PS", "the AVX512_BF16 kernel")
issue_and_kernel("BM_FmaIssue", "BM_Bf16Dot", 1, "no AVX2 and FMA on this CPU", "G_FMA_per_s", "GMACs", 8,
                 "256-bit FMAs", "the AVX2 bf16 kernel")
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
