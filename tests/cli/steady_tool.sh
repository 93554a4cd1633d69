#!/usr/bin/env bash
# Command-line tests of build/bin/steady: init, generate, eval, attn, info, and clean errors.
# Usage: steady_tool.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"

steady="$bin/steady"
tok="$src/tests/data/tokenizer/tokenizer.model"

"$steady" init --out "$tmp/m" --preset tiny --tokenizer "$tok" --seed 3 > /dev/null && pass "init tiny softmax"
"$steady" init --out "$tmp/t" --preset tiny --tokenizer "$tok" --mechanism taylor --order 3 --dtype bf16 > /dev/null \
  && pass "init tiny taylor bf16"

# --cpu-weights bf16 --cpu-gemm simd: on a checkpoint saved in bf16 the bf16 matrices hold the same
# numbers, so the greedy text is the f32 path's, which --cpu-weights stored reads as stored (auto puts
# them on AMX, VDPBF16PS or AVX2's FMAs, rounding the activations); an unknown precision or
# kernel is refused naming the flag.
a=$("$steady" generate --model "$tmp/t" --prompt "This License" --max-tokens 20 --cpu-weights stored 2> /dev/null)
b=$("$steady" generate --model "$tmp/t" --prompt "This License" --max-tokens 20 --cpu-weights bf16 --cpu-gemm simd 2> /dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && pass "generate --cpu-weights bf16 on bf16 weights = f32" || fail "bf16 generate: '$a' vs '$b'"
expect_error "generate --cpu-gemm amx refused" "--cpu-gemm: expected auto, simd, openblas, avx512vnni, avxvnni, avx2 or armdot" "$steady" generate --model "$tmp/t" --prompt x --cpu-gemm amx
"$steady" generate --model "$tmp/m" --prompt "This License" --max-tokens 8 --cpu-weights q8 > "$tmp/q8.txt" 2> "$tmp/err" &&
  [ -s "$tmp/q8.txt" ] && pass "generate --cpu-weights q8" || fail "generate q8: $(cat "$tmp/err")"
if "$steady" generate --model "$tmp/m" --prompt "x" --max-tokens 2 --cpu-weights f8 > /dev/null 2> "$tmp/err"; then
  fail "--cpu-weights f8 was accepted"
elif grep -q -- "--cpu-weights: expected auto, stored, f32, bf16, q8, q4 or q4k" "$tmp/err"; then
  pass "generate --cpu-weights f8 refused"
else
  fail "--cpu-weights f8: $(cat "$tmp/err")"
fi
# generate: greedy is deterministic; seeded sampling is deterministic; text is streamed to stdout.
a=$("$steady" generate --model "$tmp/m" --prompt "This License" --max-tokens 20 2> /dev/null)
b=$("$steady" generate --model "$tmp/m" --prompt "This License" --max-tokens 20 2> /dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && pass "greedy generate is deterministic" || fail "greedy generate: '$a' vs '$b'"
a=$("$steady" generate --model "$tmp/m" --prompt "The" --max-tokens 20 --temperature 1 --top-p 0.9 --seed 11 2> /dev/null)
b=$("$steady" generate --model "$tmp/m" --prompt "The" --max-tokens 20 --temperature 1 --top-p 0.9 --seed 11 2> /dev/null)
[ "$a" = "$b" ] && pass "seeded sampling is deterministic" || fail "seeded sampling differs"
"$steady" generate --model "$tmp/m" --mechanism taylor --order 3 --prompt "The" --max-tokens 5 > /dev/null 2> "$tmp/err" \
  && grep -q "generated" "$tmp/err" && pass "softmax weights served as taylor" || fail "serve as taylor: $(cat "$tmp/err")"
"$steady" generate --model "$tmp/t" --prompt "The" --max-tokens 5 > /dev/null 2>&1 && pass "generate from bf16 taylor checkpoint" \
  || fail "generate bf16 taylor"

# generate --chat renders the prompt as a user message with the model's chat template (the default
# here), exactly as the rendered text would generate with the template's stop string.
a=$("$steady" generate --model "$tmp/m" --chat --system "Be brief." --prompt "This License" --max-tokens 12 2> /dev/null)
b=$("$steady" generate --model "$tmp/m" --prompt "$(printf 'Be brief.\n\nUser: This License\nAssistant:')" --stop "$(printf '\nUser:')" \
  --max-tokens 12 2> /dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && pass "generate --chat uses the chat template" || fail "generate --chat: '$a' vs '$b'"

# eval: perplexity JSON with the figures the quality table needs.
head -c 3000 /usr/share/common-licenses/GPL-3 > "$tmp/val.txt"
"$steady" eval --model "$tmp/m" --data "$tmp/val.txt" --max-tokens 300 --json > "$tmp/eval.json"
python3 - "$tmp/eval.json" <<'PY' && pass "eval reports perplexity and state bytes" || fail "eval json"
import json, math, sys
r = json.load(open(sys.argv[1]))
assert r["tokens"] == 299, r
assert math.isfinite(r["perplexity"]) and r["perplexity"] > 1, r
assert r["state_bytes_per_session"] == 0 and r["peak_session_bytes"] > 0, r  # softmax: all KV cache
PY
"$steady" eval --model "$tmp/t" --data "$tmp/val.txt" --max-tokens 200 --json > "$tmp/eval_t.json"
python3 -c "import json,sys; r=json.load(open('$tmp/eval_t.json')); assert r['state_bytes_per_session']>0 and r['peak_session_bytes']==r['state_bytes_per_session'], r" \
  && pass "eval: taylor state is constant" || fail "eval taylor state"
# A softmax checkpoint served with a sliding window (--param window=W), and a hybrid checkpoint (a
# window on layer 0 through the "layers" override, taylor elsewhere): constant state, reported.
"$steady" eval --model "$tmp/m" --data "$tmp/val.txt" --max-tokens 200 --json --mechanism sliding_window \
  --param window=16 > "$tmp/eval_w.json"
python3 -c "import json,sys; r=json.load(open('$tmp/eval_w.json')); assert r['mechanism']=='sliding_window' and r['attention']['window']==16 and r['peak_session_bytes']==r['state_bytes_per_session']>0 and 'layers' not in r, r" \
  && pass "eval: softmax weights served with a sliding window" || fail "eval sliding_window"
expect_error "a sliding window needs its window" "attention.window" "$steady" eval --model "$tmp/m" --data "$tmp/val.txt" \
  --mechanism sliding_window
mkdir -p "$tmp/h" && cp "$tmp/m"/* "$tmp/h"/
python3 - "$tmp/h/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["attention"] = {"mechanism": "taylor", "order": 2, "layers": {"0": {"mechanism": "sliding_window", "window": 8}}}
json.dump(c, open(sys.argv[1], "w"))
PY
"$steady" eval --model "$tmp/h" --data "$tmp/val.txt" --max-tokens 200 --json > "$tmp/eval_h.json"
python3 -c "import json,sys; r=json.load(open('$tmp/eval_h.json')); l=r['layers']; assert [x['mechanism'] for x in l]==['sliding_window','taylor','taylor','taylor'] and l[0]['window']==8 and r['peak_session_bytes']==r['state_bytes_per_session'], r" \
  && pass "eval: a hybrid reports every layer" || fail "eval hybrid"

# info
"$steady" info --model "$tmp/m" | python3 -c "import json,sys; j=json.load(sys.stdin); assert j['parameters']>0" \
  && pass "info prints JSON" || fail "info"

# attn: recurrent == parallel == chunked on a researcher's raw tensors, F64 in -> F64 out.
python3 - "$tmp/attn_in.safetensors" "$src/tests/cli" <<'PY'
import random, sys
sys.path.insert(0, sys.argv[2])
import safetensors_io
random.seed(5)
H, T, dk, dv = 2, 40, 4, 3
r = lambda n, s=1.0: [random.gauss(0, s) for _ in range(n)]
safetensors_io.write(sys.argv[1], {"q": ([H, T, dk], r(H*T*dk, 0.5)), "k": ([H, T, dk], r(H*T*dk, 0.5)),
                                   "v": ([H, T, dv], r(H*T*dv))}, "F64")
PY
ok=1
for form in recurrent parallel chunked; do
  "$steady" attn --mechanism taylor --order 3 --form $form --chunk-size 7 --in "$tmp/attn_in.safetensors" \
    --out "$tmp/y_$form.safetensors" || ok=0
done
python3 - "$tmp" "$src/tests/cli" <<'PY' && [ $ok = 1 ] && pass "attn: recurrent == parallel == chunked (taylor, F64)" || fail "attn forms"
import sys
sys.path.insert(0, sys.argv[2])
import safetensors_io
ys = {f: safetensors_io.read("%s/y_%s.safetensors" % (sys.argv[1], f))["y"] for f in ("recurrent", "parallel", "chunked")}
assert ys["parallel"][0] == [2, 40, 3], ys["parallel"][0]
ref = ys["parallel"][1]
for f in ("recurrent", "chunked"):
    err = max(abs(a - b) for a, b in zip(ys[f][1], ref))
    assert err < 1e-10, (f, err)
PY
# softmax through attn, F32
python3 - "$tmp/attn32.safetensors" "$src/tests/cli" <<'PY'
import random, sys
sys.path.insert(0, sys.argv[2])
import safetensors_io
random.seed(6)
r = lambda n: [random.gauss(0, 1) for _ in range(n)]
safetensors_io.write(sys.argv[1], {"q": ([1, 5, 2], r(10)), "k": ([1, 5, 2], r(10)), "v": ([1, 5, 2], r(10))}, "F32")
PY
"$steady" attn --mechanism softmax --in "$tmp/attn32.safetensors" --out "$tmp/y32.safetensors" \
  && python3 -c "
import sys; sys.path.insert(0, '$src/tests/cli'); import safetensors_io, math
t = safetensors_io.read('$tmp/attn32.safetensors'); y = safetensors_io.read('$tmp/y32.safetensors')['y'][1]
q, k, v = t['q'][1], t['k'][1], t['v'][1]
for i in range(5):
    w = [math.exp((q[2*i]*k[2*j] + q[2*i+1]*k[2*j+1]) / math.sqrt(2)) for j in range(i + 1)]
    for d in range(2):
        ref = sum(w[j] * v[2*j+d] for j in range(i + 1)) / sum(w)
        assert abs(ref - y[2*i+d]) < 1e-5, (i, d, ref, y[2*i+d])
" && pass "attn: softmax F32 matches a direct computation" || fail "attn softmax"

# attn on the mechanisms that take extra inputs: sliced_relu on projected scores zq, zk [H, T];
# slay with its anchors and omegas given as tensors. Forms must agree.
python3 - "$tmp" "$src/tests/cli" <<'PY'
import random, sys
sys.path.insert(0, sys.argv[2])
import safetensors_io
random.seed(7)
H, T, dk, dv = 2, 30, 4, 3
r = lambda n, s=1.0: [random.gauss(0, s) for _ in range(n)]
safetensors_io.write(sys.argv[1] + "/sliced_in.safetensors",
                     {"zq": ([H, T], r(H*T)), "zk": ([H, T], r(H*T)), "v": ([H, T, dv], r(H*T*dv))}, "F64")
R, P, M = 2, 8, 16
safetensors_io.write(sys.argv[1] + "/slay_in.safetensors",
                     {"q": ([H, T, dk], r(H*T*dk)), "k": ([H, T, dk], r(H*T*dk)), "v": ([H, T, dv], r(H*T*dv)),
                      "slay.anchors": ([P, dk], r(P*dk)), "slay.omega": ([R, H, dk, M], r(R*H*dk*M))}, "F64")
PY
ok=1
for form in recurrent parallel chunked; do
  "$steady" attn --mechanism sliced_relu --param decoder=exact --form $form --in "$tmp/sliced_in.safetensors" \
    --out "$tmp/ys_$form.safetensors" || ok=0
  "$steady" attn --mechanism slay --form $form --in "$tmp/slay_in.safetensors" --out "$tmp/yl_$form.safetensors" || ok=0
done
python3 - "$tmp" "$src/tests/cli" <<'PY' && [ $ok = 1 ] && pass "attn: sliced_relu (zq, zk) and slay (with its tensors), forms agree" || fail "attn sliced/slay"
import sys
sys.path.insert(0, sys.argv[2])
import safetensors_io
for prefix in ("ys", "yl"):
    ys = {f: safetensors_io.read("%s/%s_%s.safetensors" % (sys.argv[1], prefix, f))["y"] for f in ("recurrent", "parallel", "chunked")}
    assert ys["parallel"][0] == [2, 30, 3], ys["parallel"][0]
    ref = ys["parallel"][1]
    scale = max(abs(x) for x in ref)
    for f in ("recurrent", "chunked"):
        err = max(abs(a - b) for a, b in zip(ys[f][1], ref)) / scale
        assert err < 1e-9, (prefix, f, err)
PY
expect_error "attn: slay without its tensors" "slay.anchors" "$steady" attn --mechanism slay --in "$tmp/attn_in.safetensors" --out "$tmp/never.safetensors"

# attn reads a mechanism's dimensions from its tensors: slay with 3 nodes, 5 anchors, 7 features and
# dark with 24 features of rank 3 run without --param; the same values given agree bit for bit, and
# a value that disagrees names the flag and the tensor.
python3 - "$tmp" "$src/tests/cli" <<'PY'
import random, sys
sys.path.insert(0, sys.argv[2])
import safetensors_io
random.seed(11)
H, T, dk, dv = 2, 17, 4, 3
r = lambda n: [random.gauss(0, 1) for _ in range(n)]
qkv = {"q": ([H, T, dk], r(H*T*dk)), "k": ([H, T, dk], r(H*T*dk)), "v": ([H, T, dv], r(H*T*dv))}
R, P, M = 3, 5, 7
safetensors_io.write(sys.argv[1] + "/slay_dims.safetensors",
                     dict(qkv, **{"slay.anchors": ([P, dk], r(P*dk)), "slay.omega": ([R, H, dk, M], r(R*H*dk*M))}), "F64")
F, rank = 24, 3
safetensors_io.write(sys.argv[1] + "/dark_dims.safetensors",
                     dict(qkv, **{"dark.M": ([H, rank, dk], r(H*rank*dk)), "dark.G": ([H, F, rank], r(H*F*rank))}), "F64")
PY
ok=1
for m in slay dark; do
  for form in recurrent parallel; do
    "$steady" attn --mechanism $m --form $form --in "$tmp/${m}_dims.safetensors" --out "$tmp/${m}_dims_$form.safetensors" || ok=0
  done
done
"$steady" attn --mechanism slay --param nodes=3 --param anchors=5 --param features=7 --form parallel \
  --in "$tmp/slay_dims.safetensors" --out "$tmp/slay_dims_given.safetensors" || ok=0
"$steady" attn --mechanism dark --param features=24 --param rank=3 --form parallel \
  --in "$tmp/dark_dims.safetensors" --out "$tmp/dark_dims_given.safetensors" || ok=0
python3 - "$tmp" "$src/tests/cli" <<'PY' && [ $ok = 1 ] && pass "attn: slay and dark dimensions come from their tensors" || fail "attn dimensions from tensors"
import sys
sys.path.insert(0, sys.argv[2])
import safetensors_io
for m in ("slay", "dark"):
    y = {f: safetensors_io.read("%s/%s_dims_%s.safetensors" % (sys.argv[1], m, f))["y"] for f in ("recurrent", "parallel", "given")}
    assert y["parallel"][0] == [2, 17, 3], y["parallel"][0]
    assert y["given"] == y["parallel"], m
    scale = max(abs(x) for x in y["parallel"][1])
    err = max(abs(a - b) for a, b in zip(y["recurrent"][1], y["parallel"][1])) / scale
    assert err < 1e-9, (m, err)
PY
expect_error "attn: a --param that disagrees with a tensor names both" "features=256 disagrees with tensor dark.G [2, 24, 3]" \
  "$steady" attn --mechanism dark --param features=256 --in "$tmp/dark_dims.safetensors" --out "$tmp/never.safetensors"
expect_error "attn: slay nodes that disagree" "nodes=2 disagrees with tensor slay.omega [3, 2, 4, 7]" \
  "$steady" attn --mechanism slay --param nodes=2 --in "$tmp/slay_dims.safetensors" --out "$tmp/never.safetensors"

# Bad input: clear errors, non-zero exit, nothing written.
expect_error "missing --model" "--model" "$steady" generate --prompt hi
expect_error "unknown flag" "--bogus" "$steady" generate --model "$tmp/m" --prompt hi --bogus 1
expect_error "unknown mechanism" "flash" "$steady" generate --model "$tmp/m" --prompt hi --mechanism flash
expect_error "bad taylor order" "order" "$steady" generate --model "$tmp/m" --prompt hi --mechanism taylor --order 0
expect_error "NaN temperature" "temperature" "$steady" generate --model "$tmp/m" --prompt hi --temperature nan
expect_error "no checkpoint" "config.json" "$steady" generate --model "$tmp/nothing" --prompt hi
cp -r "$tmp/m" "$tmp/broken"
head -c 1000 "$tmp/m/model.safetensors" > "$tmp/broken/model.safetensors"
expect_error "truncated model.safetensors" "model.safetensors" "$steady" generate --model "$tmp/broken" --prompt hi
expect_error "attn: missing tensors" "missing tensor" "$steady" attn --mechanism taylor --in "$tmp/y32.safetensors" --out "$tmp/never.safetensors"
python3 - "$tmp/nan.safetensors" "$src/tests/cli" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
import safetensors_io
safetensors_io.write(sys.argv[1], {"q": ([1, 2, 2], [1, float("nan"), 0, 0]), "k": ([1, 2, 2], [0] * 4), "v": ([1, 2, 2], [0] * 4)})
PY
expect_error "attn: NaN input" "q" "$steady" attn --mechanism softmax --in "$tmp/nan.safetensors" --out "$tmp/never.safetensors"
[ ! -e "$tmp/never.safetensors" ] && pass "failed attn wrote no output" || fail "failed attn left a file"

finish steady_tool
