#!/usr/bin/env bash
# Command-line tests of `steady bench`: its JSON fields are present and consistent with each other
# and with the byte accounting (docs/benchmarks.md), the softmax KV cache's bytes grow with the
# context while Taylor's do not, and bad input is a clear error.
# Usage: bench_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
source "$(dirname "$0")/lib.bash"
steady="$bin/steady"
py=/usr/bin/python3

# expect_error NAME STATUS NEEDLE CMD...: the command must exit with STATUS (a number, or "nonzero")
# and say NEEDLE on stderr.
expect_error() {
  local name=$1 status=$2 needle=$3 rc=0
  shift 3
  "$@" > "$tmp/out" 2> "$tmp/err" || rc=$?
  if [ "$rc" = 0 ] || { [ "$status" != nonzero ] && [ "$rc" != "$status" ]; }; then
    fail "$name: exit status $rc, expected $status: $(cat "$tmp/err")"
  elif grep -qF -- "$needle" "$tmp/err"; then
    pass "$name"
  else
    fail "$name: error did not mention '$needle': $(cat "$tmp/err")"
  fi
}

run_bench() {  # run_bench OUT.json [flags...]
  local out=$1
  shift
  "$steady" bench --device cpu --preset tiny --batch 2 --steps 3 --prefill-tokens 64 --json "$@" > "$out"
}
run_bench "$tmp/softmax64.json" --context 64 && pass "bench: softmax, context 64" || fail "bench softmax 64"
small=(--copy-bytes 8388608)  # the remaining runs: a smaller copy buffer, for time
run_bench "$tmp/softmax256.json" --context 256 "${small[@]}" && pass "bench: softmax, context 256" || fail "bench softmax 256"
run_bench "$tmp/taylor64.json" --context 64 --mechanism taylor --order 2 "${small[@]}" \
  && pass "bench: taylor, context 64" || fail "bench taylor 64"
run_bench "$tmp/taylor100k.json" --context 100000 --mechanism taylor --order 2 "${small[@]}" \
  && pass "bench: taylor, context 100000" || fail "bench taylor 100000"
# A sliding window of 300: below it, and twice past it (a ring that holds W tokens either way).
for context in 40 5000 100000; do
  run_bench "$tmp/window$context.json" --context $context --mechanism sliding_window --param window=300 "${small[@]}" \
    && pass "bench: sliding_window, context $context" || fail "bench sliding_window $context"
done

"$py" - "$tmp" <<'PY' && pass "bench: fields present, positive and consistent" || fail "bench fields"
import json, math, sys
close = lambda a, b: math.isclose(a, b, rel_tol=1e-9)
for name in ("softmax64", "softmax256", "taylor64", "taylor100k", "window40", "window5000", "window100000"):
    r = json.load(open("%s/%s.json" % (sys.argv[1], name)))
    d, p, m = r["decode"], r["prefill"], r["model"]
    assert r["device"] == "cpu", r
    for k in ("hidden", "layers", "heads", "kv_heads", "head_dim", "vocab", "parameters"):
        assert m[k] > 0, (name, k, m)
    for k in ("weight_bytes", "copy_bytes", "copy_bandwidth_bytes_per_second"):
        assert r[k] > 0, (name, k, r[k])
    for k in ("setup_seconds", "step_seconds_median", "step_seconds_min", "tokens_per_second", "bytes_per_step",
              "state_bytes_read_per_step", "state_bytes_written_per_step", "bandwidth_bytes_per_second",
              "bandwidth_fraction_of_copy"):
        assert d[k] > 0, (name, k, d)
    assert d["batch"] == 2 and d["steps"] == 3 and d["step_seconds_min"] <= d["step_seconds_median"], (name, d)
    assert close(d["tokens_per_second"], d["batch"] / d["step_seconds_median"]), (name, d)
    assert d["bytes_per_step"] >= r["weight_bytes"], (name, d)
    assert close(d["bytes_per_step"],
                 r["weight_bytes"] + d["state_bytes_read_per_step"] + d["state_bytes_written_per_step"]), (name, d)
    assert close(d["bandwidth_bytes_per_second"], d["bytes_per_step"] / d["step_seconds_median"]), (name, d)
    assert close(d["bandwidth_fraction_of_copy"],
                 d["bandwidth_bytes_per_second"] / r["copy_bandwidth_bytes_per_second"]), (name, d)
    assert p["tokens"] == 64 and p["seconds"] > 0 and close(p["tokens_per_second"], 64 / p["seconds"]), (name, p)
    a = r["attention_alone"]
    assert a["layer"] == 0 and a["seconds_median"] > 0 and a["bytes"] > 0, (name, a)
    assert close(a["bandwidth_bytes_per_second"], a["bytes"] / a["seconds_median"]), (name, a)
    if name.startswith("taylor"):
        # One layer's share of the state, read and written once per slot.
        assert close(a["bytes"], 2 * d["batch"] * r["state_bytes_per_session"] / m["layers"]), (name, a)
    if name.startswith("window"):
        # The ring: read as far as it holds tokens (all W = 300 past the window), one row and the
        # cursor written per layer and slot; the slots absorb min(context, W) real tokens.
        row = r["model"]["kv_heads"] * 2 * r["model"]["head_dim"] * 4
        assert not d["state_grows"] and r["state_bytes_per_session"] == m["layers"] * (300 * row + 8), (name, r)
        assert close(d["state_bytes_written_per_step"], 2 * m["layers"] * (row + 8)), (name, d)
        assert d["setup_tokens"] == min(d["context"], 300), (name, d)
        if d["context"] > 300:
            assert close(d["state_bytes_read_per_step"], 2 * r["state_bytes_per_session"]), (name, d)
        else:
            assert d["state_bytes_read_per_step"] < r["state_bytes_per_session"], (name, d)
    elif name.startswith("taylor"):
        # Constant state: each slot reads and rewrites its fixed state, nothing else.
        s = 2 * r["state_bytes_per_session"]
        assert not d["state_grows"] and r["state_bytes_per_session"] > 0, (name, r)
        assert close(d["state_bytes_read_per_step"], s) and close(d["state_bytes_written_per_step"], s), (name, d)
    else:
        # KV cache: read whole (at least `context` rows per slot), one row written per slot.
        assert d["state_grows"] and r["state_bytes_per_session"] == 0, (name, r)
        row = r["model"]["layers"] * r["model"]["kv_heads"] * 2 * r["model"]["head_dim"] * 4
        assert d["state_bytes_read_per_step"] >= 2 * d["context"] * row, (name, d)
        assert close(d["state_bytes_written_per_step"], 2 * row), (name, d)
        assert d["setup"] == "random KV rows" and d["setup_tokens"] == 1, (name, d)
load = lambda n: json.load(open("%s/%s.json" % (sys.argv[1], n)))["decode"]
assert load("softmax256")["bytes_per_step"] > load("softmax64")["bytes_per_step"]
assert load("taylor100k")["bytes_per_step"] == load("taylor64")["bytes_per_step"]
assert load("taylor100k")["setup_tokens"] == 256  # not 100,000: the position is set, the state is kept
assert load("taylor100k")["setup"] == "state copied at the context"
assert load("window100000")["bytes_per_step"] == load("window5000")["bytes_per_step"]
assert load("window40")["bytes_per_step"] < load("window5000")["bytes_per_step"]
PY

"$steady" bench --device cpu --preset tiny --batch 1 --context 8 --steps 1 --prefill-tokens 8 "${small[@]}" > "$tmp/table" \
  && grep -q "^decode tokens/s" "$tmp/table" && grep -q "^prefill" "$tmp/table" \
  && pass "bench: human-readable table" || fail "bench table: $(cat "$tmp/table")"

# Bad input: INVALID_ARGUMENT exits 2 naming the flag; a missing file exits 1 naming it.
base=(bench --device cpu --steps 1 --prefill-tokens 0)
expect_error "bench: batch 0" 2 "--batch" "$steady" "${base[@]}" --preset tiny --batch 0 --context 8
expect_error "bench: negative context" 2 "--context" "$steady" "${base[@]}" --preset tiny --batch 1 --context -1
expect_error "bench: missing --batch" 2 "--batch" "$steady" "${base[@]}" --preset tiny --context 8
# A batch whose states pass the memory available is refused naming the sizes, before the smaller
# batches' reports (it was std::bad_alloc after them: llama1b taylor P=4, 3.19 GB a session, at 16).
expect_error "bench: states beyond the memory" 1 "need more memory than this machine has available" \
  "$steady" bench --device cpu --preset tiny --mechanism taylor --order 4 --batch 1,1048576 --context 8 --steps 1 --prefill-tokens 0 --json
[ ! -s "$tmp/out" ] && pass "bench: no report before the refusal" || fail "bench: reports before the refusal: $(head -c 200 "$tmp/out")"
expect_error "bench: unknown preset" 2 "--preset" "$steady" "${base[@]}" --preset huge --batch 1 --context 8
expect_error "bench: no shape" 2 "--preset" "$steady" "${base[@]}" --batch 1 --context 8
expect_error "bench: --model with --config" 2 "--model" "$steady" "${base[@]}" --model "$tmp" --config "$tmp/c.json" \
  --batch 1 --context 8
expect_error "bench: --config with --preset" 2 "--config" "$steady" "${base[@]}" --config "$tmp/c.json" --preset tiny \
  --batch 1 --context 8
expect_error "bench: missing config file" 1 "$tmp/none.json" "$steady" "${base[@]}" --config "$tmp/none.json" \
  --batch 1 --context 8
expect_error "bench: unknown device" 2 "--device" "$steady" "${base[@]}" --preset tiny --batch 1 --context 8 --device tpu
expect_error "bench: KV cache too large for the cpu" 2 "--context" "$steady" "${base[@]}" --preset tiny --batch 64 \
  --context 100000 "${small[@]}"
# Lists of batches and contexts: one model, one JSON line per pair, the prefill with the first.
"$steady" bench --device cpu --preset tiny --batch 1,2 --context 16,32 --steps 2 --prefill-tokens 16 \
  "${small[@]}" --json > "$tmp/list.jsonl" &&
  "$py" - "$tmp/list.jsonl" <<'PY' && pass "bench: lists of batches and contexts" || fail "bench lists"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert [(r["decode"]["batch"], r["decode"]["context"]) for r in rows] == [(1, 16), (1, 32), (2, 16), (2, 32)], rows
assert rows[0]["prefill"]["tokens"] == 16 and all(r["prefill"] is None for r in rows[1:]), rows
PY
expect_error "bench: a bad list" 2 "--batch" "$steady" "${base[@]}" --preset tiny --batch 2,x --context 8
# A list of prefill lengths: one measurement each, with the first report; the CPU does not time a
# prefill's attention alone (null).
"$steady" bench --device cpu --preset tiny --batch 1 --context 8 --steps 2 --prefill-tokens 16,32 "${small[@]}" \
  --json > "$tmp/prefills.json" &&
  "$py" -c 'import json,sys; p=json.load(open(sys.argv[1]))["prefill"]; assert [x["tokens"] for x in p] == [16, 32] and all(x["attention_alone"] is None for x in p), p' \
    "$tmp/prefills.json" && pass "bench: a list of prefill lengths" || fail "bench --prefill-tokens list"
expect_error "bench: a bad --cuda-kv" 2 "--cuda-kv" "$steady" "${base[@]}" --preset tiny --batch 1 --context 8 --cuda-kv f16

# The device session's report (tools/bench/gpu_report.py) over these rows, as a GPU run lays them out.
mkdir -p "$tmp/session/bench"
cp "$tmp/softmax64.json" "$tmp/taylor64.json" "$tmp/session/bench/"
cp "$tmp/list.jsonl" "$tmp/session/bench/list.json"
printf 'name, memory.total [MiB]\nSome GPU, 1024 MiB\n' > "$tmp/session/nvidia-smi.csv"
"$py" "$(dirname "$0")/../../tools/bench/gpu_report.py" "$tmp/session" > "$tmp/report.md" 2> "$tmp/err" &&
  grep -q '^| taylor64 | taylor P=2 | 2 x 64 |' "$tmp/report.md" &&
  grep -q '^| softmax64 | softmax (fp32 KV) | 2 x 64 |' "$tmp/report.md" &&
  grep -q '^| softmax (fp32 KV) | 67.1 MB | 15 | 1.0x |' "$tmp/report.md" &&
  grep -q '^| taylor P=2 | .* | .* | [0-9.]*x (meets 100x) |$' "$tmp/report.md" &&
  grep -q '^| 64 | steady taylor P=2 (taylor64) | - | - | [0-9]* | - |' "$tmp/report.md" &&
  grep -q '^| list b2 L32 | softmax (fp32 KV) | 2 x 32 |' "$tmp/report.md" &&
  pass "bench: gpu_report tables" || fail "gpu_report: $(cat "$tmp/report.md" "$tmp/err")"

# --threads and --cpu-gemm reach the report; bad values are refused naming the flag.
run_bench "$tmp/threads.json" --context 64 --threads 1 --cpu-gemm openblas "${small[@]}" &&
  "$py" -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["cpu_threads"] == 1 and r["cpu_gemm"] == "openblas" and r["cpu_simd"] and r["cpu_model"] not in ("", "unknown") and sorted(r["cpu_gemm_paths"]) == ["bf16", "f16", "f32", "iq4_nl", "iq4_xs", "q2k", "q3k", "q4", "q4_1", "q4k", "q5_0", "q5_1", "q5k", "q6k", "q8", "q8_0"], r' \
    "$tmp/threads.json" && pass "bench: --threads 1 --cpu-gemm openblas in the report" || fail "bench --threads/--cpu-gemm"
# Under --cpu-weights stored every matrix keeps the widening kernels whatever the CPU has, and the
# report says so (it named the int8 kernels there until 2026-11-29).
run_bench "$tmp/stored.json" --context 64 --cpu-weights stored "${small[@]}" &&
  "$py" -c 'import json,sys; p=json.load(open(sys.argv[1]))["cpu_gemm_paths"]; assert all(v.startswith("widening") for k, v in p.items() if k != "f32"), p' \
    "$tmp/stored.json" && pass "bench: --cpu-weights stored reports the widening kernels" || fail "bench --cpu-weights stored paths"
# bf16 and q8 matrices: the backend says so, and a step reads about a half and a quarter of the
# weight bytes (against the f32 run above). bf16 goes on AMX tiles by default where the CPU has them
# (--cpu-gemm simd: never).
reduced_weights() {  # NAME DEVICE LOW HIGH FLAGS...: weight bytes within (LOW, HIGH) x f32's
  local name=$1 device=$2 low=$3 high=$4
  shift 4
  run_bench "$tmp/$name.json" --context 64 "$@" "${small[@]}" &&
    "$py" -c '
import json, sys
r, f = (json.load(open(p)) for p in sys.argv[1:3])
low, high = float(sys.argv[4]), float(sys.argv[5])
assert r["device"] == sys.argv[3], r["device"]
assert low * f["weight_bytes"] < r["weight_bytes"] < high * f["weight_bytes"], (r["weight_bytes"], f["weight_bytes"])
' "$tmp/$name.json" "$tmp/softmax64.json" "$device" "$low" "$high" &&
    pass "bench: $* reads $low-$high of the weight bytes on \"$device\"" || fail "bench $*"
}
reduced_weights bf16 "cpu (bf16 weights)" 0.45 0.6 --cpu-weights bf16 --cpu-gemm simd
reduced_weights q8-simd "cpu (q8 weights)" 0.2 0.35 --cpu-weights q8 --cpu-gemm simd
# By default q8, q4 and q4k go to the widest int8 path the CPU has (AMX-INT8, AVX512_VNNI, AVX-VNNI, AVX2),
# and bf16 to AMX tiles where it has them, else to VDPBF16PS where it has AVX512_BF16, else to AVX2's
# FMAs (kernels/cpu/matmul_dot.h).
int8=""
if grep -qw amx_int8 /proc/cpuinfo && grep -qw avx512_vnni /proc/cpuinfo; then int8=AMX_INT8
elif grep -qw avx512_vnni /proc/cpuinfo; then int8=AVX512_VNNI
elif grep -qw avx_vnni /proc/cpuinfo; then int8=AVX_VNNI
elif grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && grep -qw f16c /proc/cpuinfo; then int8=AVX2
fi
if [ -n "$int8" ]; then
  reduced_weights q8 "cpu (q8 weights on $int8)" 0.2 0.35 --cpu-weights q8
else
  reduced_weights q8 "cpu (q8 weights)" 0.2 0.35 --cpu-weights q8
fi
# q4 (4.5 bits a weight) runs everywhere: the int8 kernels where the CPU has one, else (and with
# --cpu-gemm simd) the widening kernel.
reduced_weights q4-simd "cpu (q4 weights)" 0.1 0.2 --cpu-weights q4 --cpu-gemm simd
if [ -n "$int8" ]; then
  reduced_weights q4 "cpu (q4 weights on $int8)" 0.1 0.2 --cpu-weights q4
fi
# q4k (4.625 bits a weight at whole 256-weight super-blocks; more here, where the preset's rows pad to them)
# runs everywhere: the int8 kernels where the CPU has one, else (and with --cpu-gemm simd) the widening kernel.
reduced_weights q4k-simd "cpu (q4k weights)" 0.15 0.35 --cpu-weights q4k --cpu-gemm simd
if [ -n "$int8" ]; then
  reduced_weights q4k "cpu (q4k weights on $int8)" 0.15 0.35 --cpu-weights q4k
fi
# --cpu-gemm avx512vnni / avxvnni / avx2 force that int8 path (the name and the report say so), or
# are refused naming the extension the CPU lacks.
for path in avx512vnni:avx512_vnni:AVX512_VNNI avxvnni:avx_vnni:AVX_VNNI avx2:avx2:AVX2; do
  IFS=: read -r gemm flag ext <<< "$path"
  if grep -qw "$flag" /proc/cpuinfo; then
    reduced_weights "q8-$gemm" "cpu (q8 weights on $ext)" 0.2 0.35 --cpu-weights q8 --cpu-gemm "$gemm" &&
      "$py" -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["cpu_gemm"] == sys.argv[2] and r["cpu_gemm_paths"]["q8"].startswith(sys.argv[3]), r["cpu_gemm_paths"]' \
        "$tmp/q8-$gemm.json" "$gemm" "$flag" && pass "bench: --cpu-gemm $gemm in the report" || fail "bench --cpu-gemm $gemm report"
  else
    expect_error "bench: --cpu-gemm $gemm without $ext" nonzero "lacks $ext" "$steady" bench --device cpu --preset tiny \
      --batch 1 --context 8 --cpu-gemm "$gemm"
  fi
done
if grep -qw amx_bf16 /proc/cpuinfo; then
  reduced_weights amx "cpu (bf16 weights on AMX)" 0.45 0.6 --cpu-weights bf16
elif grep -qw avx512_bf16 /proc/cpuinfo; then
  echo "skip - bench --cpu-weights bf16 on AMX (this CPU has no AMX-BF16)"
  reduced_weights dot "cpu (bf16 weights on AVX512_BF16)" 0.45 0.6 --cpu-weights bf16
elif grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  echo "skip - bench --cpu-weights bf16 on AMX or AVX512_BF16 (this CPU has neither: AVX2's FMAs)"
  reduced_weights dot "cpu (bf16 weights on AVX2)" 0.45 0.6 --cpu-weights bf16
else
  echo "skip - bench --cpu-weights bf16 on AMX, AVX512_BF16 or AVX2 (this CPU has none)"
  reduced_weights amx "cpu (bf16 weights)" 0.45 0.6 --cpu-weights bf16
fi
# --cpu-gemm avx2 puts bf16 on AVX2's FMAs on any x86 CPU with them, whatever wider kernel it has.
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && grep -qw f16c /proc/cpuinfo; then
  reduced_weights bf16-avx2 "cpu (bf16 weights on AVX2)" 0.45 0.6 --cpu-weights bf16 --cpu-gemm avx2 &&
    "$py" -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["cpu_gemm_paths"]["bf16"] == "avx2 (FMA on bf16 pairs)", r["cpu_gemm_paths"]' \
      "$tmp/bf16-avx2.json" && pass "bench: --cpu-gemm avx2's bf16 path in the report" || fail "bench --cpu-gemm avx2 bf16 report"
fi
expect_error "bench: --cpu-weights f16" nonzero "--cpu-weights" "$steady" bench --device cpu --preset tiny --batch 1 \
  --context 8 --cpu-weights f16
expect_error "bench: --cpu-gemm bogus" nonzero "--cpu-gemm" "$steady" bench --device cpu --preset tiny --batch 1 \
  --context 8 --cpu-gemm bogus
expect_error "bench: --threads -1" nonzero "--threads" "$steady" bench --device cpu --preset tiny --batch 1 \
  --context 8 --threads -1

if nvidia-smi -L > /dev/null 2>&1; then
  echo "skip - bench --device cuda without a GPU (a GPU is visible)"
else
  expect_error "bench: --device cuda without a GPU" nonzero "--device cuda" "$steady" bench --device cuda --preset tiny \
    --batch 1 --context 8
fi

finish bench_test
