#!/usr/bin/env bash
# matmul_bench's issue-rate benchmark and its peak_fraction counter (docs/cpu.md, "VPDPBUSD's issue
# rate, measured in the tree"): on a CPU with AVX512_VNNI every BM_VpdpbusdIssue variant reports a
# positive rate under its label, and an AVX512_VNNI kernel reports a finite, positive share of the
# peak measured in the same process; elsewhere the issue benchmark says why it skipped. No timing is
# compared with another (that is the benchmark's job, not a test's).
# Usage: matmul_bench_counters.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
source "$(dirname "$0")/lib.bash"

"$bin/matmul_bench" --benchmark_filter='BM_VpdpbusdIssue|BM_Q8Dot/rows:4/in:2048/out:2048/path:0' \
  --benchmark_min_time=0.01 --benchmark_format=json > "$tmp/out.json" 2> "$tmp/err" ||
  fail "matmul_bench exited with $?: $(tail -3 "$tmp/err")"

/usr/bin/python3 - "$tmp/out.json" > "$tmp/checks" <<'PY' || true
import json, math, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
issue = [r for r in runs if r["name"].startswith("BM_VpdpbusdIssue")]
dot = [r for r in runs if r["name"].startswith("BM_Q8Dot")]
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
PY
while read -r status rest; do
  if [ "$status" = ok ]; then pass "$rest"; else fail "$rest"; fi
done < "$tmp/checks"
[ -s "$tmp/checks" ] || fail "no checks ran: $(cat "$tmp/out.json" | head -5)"
finish matmul_bench_counters
