#!/usr/bin/env bash
# Hugging Face checkpoint directories as they ship (config.json, generation_config.json,
# model.safetensors or shards with an index; tools/checkpoints/random_hf.py) computed by Steady and by
# a PyTorch reference written from transformers' modeling code (tools/checkpoints/torch_reference.py,
# float64, sharing no code with Steady): the logits after a prompt within 1e-4 of their spread and 8
# greedy ids identical, for llama (attention biases, tied embeddings; rope_scaling linear, dynamic,
# llama3, yarn), mistral with a sliding window shorter than the prompt, qwen2 with windows on its upper
# layers and qwen3 (q/k norm, head_dim != hidden / heads), in f32, bf16 and f16, sharded and not. Then
# the refusals: a missing shard, a truncated shard, a window of 0, an unknown rope type, each named.
# Exit 77 (a visible skip) without /usr/bin/python3 and its torch and numpy (Debian's python3-torch).
# Usage: hf_torch_exact.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"
py=/usr/bin/python3
if ! "$py" -c "import torch, numpy" 2> /dev/null; then
  echo "SKIP: needs /usr/bin/python3 with torch and numpy (scripts/install-deps.sh)"
  exit 77
fi
gen=$src/tools/checkpoints/random_hf.py
ref=$src/tools/checkpoints/torch_reference.py
short=1,5,9,300,17,400,33,2,8,99,100,101,7,44,55,66,3,4
long=1
for i in $(seq 79); do long+=",$(((7 * i + 3) % 509 + 3))"; done  # past dynamic's 64 positions

compare() {  # compare NAME PROMPT GENERATOR_FLAGS...
  local name=$1 prompt=$2
  shift 2
  "$py" "$gen" "$@" --out "$tmp/$name" 2> /dev/null
  # --cpu-weights stored: fp32 arithmetic on the checkpoint's values (auto rounds the activations for
  # bf16 matrices on the dot-product kernels).
  if ! "$bin/steady" generate --model "$tmp/$name" --prompt-ids "$prompt" --max-tokens 8 --json --logits \
         --ignore-eos --temperature 0 --cpu-weights stored > "$tmp/$name.steady" 2> "$tmp/$name.err"; then
    fail "$name: steady generate failed: $(cat "$tmp/$name.err")"
    return
  fi
  "$py" "$ref" --model "$tmp/$name" --prompt-ids "$prompt" --max-tokens 8 > "$tmp/$name.torch"
  if result=$("$py" - "$tmp/$name.steady" "$tmp/$name.torch" << 'EOF'
import json, sys
import numpy as np
s, t = (json.load(open(p)) for p in sys.argv[1:3])
a, b = np.array(s["logits"]), np.array(t["logits"])
rel = float(np.abs(a - b).max() / b.std())
print(f"ids {'identical' if s['ids'] == t['ids'] else 'DIFFER'} ({s['ids']} vs {t['ids']}), "
      f"max |logit diff| {np.abs(a - b).max():.2e}, / logit std {rel:.2e}")
sys.exit(0 if s["ids"] == t["ids"] and rel < 1e-4 else 1)
EOF
  ); then
    pass "$name: $result"
  else
    fail "$name: $result"
  fi
}

compare llama-bias-tied "$short" --arch llama --attention-bias --tie
compare llama-llama3.bf16.2-shards "$short" --arch llama --rope-scaling llama3 --dtype bf16 --shards 2
compare llama-linear "$short" --arch llama --rope-scaling linear
compare llama-mlp-bias.bf16 "$short" --arch llama --mlp-bias --attention-bias --dtype bf16
compare llama-dynamic "$long" --arch llama --rope-scaling dynamic --layers 2
compare llama-yarn "$short" --arch llama --rope-scaling yarn
compare mistral-window8 "$short" --arch mistral --sliding-window 8
compare qwen2-window8.bf16.3-shards "$short" --arch qwen2 --sliding-window 8 --dtype bf16 --shards 3
compare qwen3.f16 "$short" --arch qwen3 --dtype f16

# Refusals at load, each naming what is wrong.
refused() {  # refused WHAT NEEDLE DIR
  if "$bin/steady" generate --model "$3" --prompt-ids 1,2 --max-tokens 1 > /dev/null 2> "$tmp/err"; then
    fail "$1: loaded"
  elif grep -q -- "$2" "$tmp/err"; then
    pass "$1: refused ($(head -c 200 "$tmp/err"))"
  else
    fail "$1: refused without naming $2: $(cat "$tmp/err")"
  fi
}
"$py" "$gen" --arch llama --shards 2 --out "$tmp/bad" 2> /dev/null
mv "$tmp/bad/model-00002-of-00002.safetensors" "$tmp/bad/moved"
refused "missing shard" "model-00002-of-00002.safetensors" "$tmp/bad"
head -c 100000 "$tmp/bad/moved" > "$tmp/bad/model-00002-of-00002.safetensors"
refused "truncated shard" "model-00002-of-00002.safetensors" "$tmp/bad"
"$py" "$gen" --arch mistral --sliding-window 8 --out "$tmp/w0" 2> /dev/null
sed -i 's/"sliding_window": 8/"sliding_window": 0/' "$tmp/w0/config.json"
refused "window of 0" "sliding_window" "$tmp/w0"
sed -i 's/"sliding_window": 0/"sliding_window": 8, "rope_scaling": {"rope_type": "longrope", "factor": 2}/' \
  "$tmp/w0/config.json"
refused "unknown rope type" "longrope" "$tmp/w0"
"$py" "$gen" --arch qwen2 --shards 2 --out "$tmp/shape" 2> /dev/null
sed -i 's/"intermediate_size": [0-9]*/"intermediate_size": 100/' "$tmp/shape/config.json"
refused "a tensor's shape against config.json" 'model-0000[12]-of-00002.safetensors: tensor "model.layers.0.mlp.gate_proj.weight": shape \[' "$tmp/shape"
# The server refuses the same directory at start, naming the tensor, and never listens.
if timeout 120 "$bin/steady-server" --model "$tmp/shape" --port 0 > "$tmp/server.out" 2>&1; then
  fail "steady-server started on a checkpoint whose shapes disagree with config.json"
elif grep -q 'gate_proj.weight": shape' "$tmp/server.out" && ! grep -q 'listening on' "$tmp/server.out"; then
  pass "steady-server refuses it at start ($(grep -o 'tensor "[^"]*": shape.*' "$tmp/server.out" | head -n 1))"
else
  fail "steady-server on mismatched shapes: $(tail -n 3 "$tmp/server.out")"
fi
finish hf_torch_exact
