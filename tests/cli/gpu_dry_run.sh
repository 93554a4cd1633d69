#!/usr/bin/env bash
# The GPU run, dry (docs/cuda.md, "Running it on a GPU"): everything a lent GPU machine's calls need
# is checked here, on a machine without one, so that the first call spends its device time on
# kernels. The bundle is built from this build's binaries (scripts/gpu_bundle.sh --no-build: kept in
# the build tree, remade only when a binary changes) and every dependency must resolve inside it or
# to the image's cuBLAS (an image without Debian's libraries); the tree plus the bundle must fit the
# device call's 64 MiB with a margin; scripts/gpu_session.sh runs every PART end to end with
# GPU_DRY_RUN=1 (the binaries load and run, the tests skip, the benchmarks run on the CPU at the tiny
# shape, the sanitizers' filters must select tests); $OUT must come back whole (at most 8 files, 2
# folders down, plain names) and hold the summary, the report's tables and one log archive; each
# PART's planned steps must fit a call's budget, and a call whose budget runs out stops starting
# steps in time; docs/cuda.md's run calls must be valid tool calls naming real PARTs.
# Usage: gpu_dry_run.sh BIN_DIR SOURCE_DIR. Skips (77) in a build without the CUDA backend.
set -uo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"
py=/usr/bin/python3
build=$(cd "$bin/.." && pwd)
cd "$src"

if [[ ! -x $bin/cuda_ops_test ]]; then
  echo "SKIPPED: this build has no CUDA backend (no nvcc), so there is no GPU bundle to check"
  exit 77
fi
for tool in patchelf xz objdump; do
  command -v "$tool" > /dev/null || { echo "SKIPPED: $tool is missing (scripts/install-deps.sh)"; exit 77; }
done

# 1. The bundle, checked while it is made.
bundle=$build/gpu-bundle-dry
if scripts/gpu_bundle.sh --no-build "$build" "$bundle" > "$tmp/bundle.log" 2>&1; then
  pass "bundle: built and every dependency resolves inside it ($(tail -n1 "$tmp/bundle.log"))"
else
  fail "bundle: $(tail -n5 "$tmp/bundle.log")"
fi
archive=$bundle/steady-gpu.tar.xz
[[ $(find "$bundle" -type f | wc -l) == 1 ]] && pass "bundle: the carried folder holds the archive alone" ||
  fail "bundle: $bundle holds $(ls "$bundle")"

# 2. What a call sends: the tree, and the archive as the carried gpu-bundle/ would be.
if scripts/gpu_size_check.sh "$(realpath --relative-to=. "$bundle")" > "$tmp/size.log" 2>&1; then
  pass "size: $(grep '^total' "$tmp/size.log")"
else
  fail "size: $(cat "$tmp/size.log")"
fi

# 3. Every PART end to end, dry.
out=$tmp/out
if GPU_DRY_RUN=1 PYTHON=$py PART=tests,bench,compare,sanitize OUT=$out BUNDLE=$archive scripts/gpu_session.sh \
  > "$tmp/session.log" 2>&1; then
  pass "session: every step passed or skipped"
else
  fail "session: $(grep -E '\| (FAIL|TIMEOUT) \|' "$out/summary.md" 2> /dev/null | head -n5) $(tail -n3 "$tmp/session.log")"
fi

# 4. $OUT as the device returns it, and what it must hold.
"$py" - "$out" "$src" <<'PY' && pass "out: <= 8 files, 2 folders down, the summary, the tables and the logs" || fail "out layout"
import os, re, sys, tarfile
out, src = sys.argv[1], sys.argv[2]
files = [os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs]
assert 0 < len(files) <= 8, files
for f in files:
    p = os.path.join(out, f)
    assert f.count("/") <= 2, "too deep: " + f
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", part) for part in f.split("/")), "odd name: " + f
    assert os.path.isfile(p) and not os.path.islink(p) and os.path.getsize(p) <= 16 << 20, f
assert sum(os.path.getsize(os.path.join(out, f)) for f in files) <= 64 << 20
summary = open(os.path.join(out, "summary.md")).read()
steps = re.findall(r"^\| (\w+) \| (\w+) \|", summary, re.M)
assert len(steps) >= 20 and all(r in ("PASS", "SKIP") for _, r in steps[1:]), steps
assert "$OUT: " in summary and "all of them come back" in summary, summary
report = open(os.path.join(out, "report.md")).read()
for heading in ("| row | mechanism | B x L |", "| context | mechanism | step (ms)", "bytes per session at 32K tokens",
                "| tokens | implementation | attention alone", "| model | perplexity cuda", "| test binary | passed"):
    assert heading in report, "report lacks " + heading
names = tarfile.open(os.path.join(out, "logs-tests-bench-compare-sanitize.tar.gz")).getnames()
for member in ("logs/preflight.log", "logs/tests/cuda_ops_test/results.tsv", "logs/tests/backend_cuda_test/results.tsv",
               "logs/bench/decode_taylor3_batch.json", "logs/bench/prefill_taylor3.json", "logs/eval", "logs/memcheck_ops.log"):
    assert member in names, "the archive lacks " + member
PY

# 5. Each PART's plan fits a call: expected times within 85% of its budget (540 s; short's 530 s,
# about what a 15-minute lease holds besides the machine's start), no step allowed past the
# budget less the reserve for the report.
for part in tests bench compare sanitize short; do
  plan=$(PART=$part scripts/gpu_session.sh --plan)
  total=$(awk '/expected .* s of a/ {print $3}' <<< "$plan")
  budget=$(awk '/expected .* s of a/ {print $(NF - 2)}' <<< "$plan")
  longest=$(awk '/at most/ {print $(NF - 1)}' <<< "$plan" | sort -n | tail -n1)
  if [[ -n $total && -n $budget ]] && ((budget <= 540 && total * 100 <= budget * 85 && longest <= budget - 20)); then
    pass "plan: PART=$part expects $total s, no step over $longest s"
  else
    fail "plan: PART=$part: $plan"
  fi
done

# 6. PART=short runs its steps alone, in its own archive (ONLY keeps this dry call short).
GPU_DRY_RUN=1 PYTHON=$py PART=short ONLY=engine OUT=$tmp/shortpart BUNDLE=$archive scripts/gpu_session.sh \
  > "$tmp/shortpart.log" 2>&1
steps=$(grep -oE '^\| [a-z_0-9]+ \|' "$tmp/shortpart/summary.md" 2> /dev/null | tr -d '| ' | grep -vx step | paste -sd, -)
want=preflight,$(sed -n 's/^SHORT_STEPS=//p' scripts/gpu_session.sh)
if [[ $steps == "$want" ]] && grep -q '^| engine | \(PASS\|SKIP\) |' "$tmp/shortpart/summary.md" &&
  [[ -f $tmp/shortpart/logs-short.tar.gz ]]; then
  pass "short: its steps alone ($steps), logs-short.tar.gz"
else
  fail "short: steps '$steps', wanted '$want'; $(ls "$tmp/shortpart" 2> /dev/null | tr '\n' ' ')$(tail -n3 "$tmp/shortpart.log")"
fi

# 7. A call whose budget runs out stops starting steps and still returns its summary in time.
start=$(date +%s)
GPU_DRY_RUN=1 PYTHON=$py PART=bench GPU_BUDGET_S=30 RESERVE_S=20 OUT=$tmp/short BUNDLE=$archive \
  scripts/gpu_session.sh > "$tmp/short.log" 2>&1
took=$(($(date +%s) - start))
if grep -q "budget is spent" "$tmp/short/summary.md" 2> /dev/null && ((took <= 45)); then
  pass "budget: steps past a 30 s budget are not started; the call ended after $took s"
else
  fail "budget: $took s; $(cat "$tmp/short/summary.md" 2> /dev/null | tail -n8)"
fi

# 8. docs/cuda.md's device calls: each a valid `run` (command under 2,000 characters, timeout_s at
# most 600, carry of ignored paths) naming PARTs the session knows.
"$py" - "$src/docs/cuda.md" <<'PY' > "$tmp/calls.txt" && pass "docs: $(wc -l < "$tmp/calls.txt") run calls, each valid" || fail "docs: run calls $(cat "$tmp/calls.txt")"
import json, re, sys
text = open(sys.argv[1]).read()
calls = re.findall(r"^run (\{.*\})$", text, re.M)
assert len(calls) >= 4, "fewer than 4 run calls in docs/cuda.md"
for c in calls:
    call = json.loads(c)
    assert len(call["command"]) < 2000 and 0 < call.get("timeout_s", 600) <= 600, call
    assert call.get("carry") == ["gpu-bundle"], call
    m = re.search(r"PART=([a-z,]+)", call["command"])
    assert m, call
    print(m.group(1))
PY
while read -r part; do
  PART=$part scripts/gpu_session.sh --plan > /dev/null 2>&1 || fail "docs: PART=$part is not a session part"
done < "$tmp/calls.txt"

finish gpu_dry_run
