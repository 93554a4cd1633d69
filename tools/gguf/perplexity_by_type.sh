#!/usr/bin/env bash
# What each GGUF tensor type costs in perplexity and memory when Steady serves the file: a trained
# checkpoint written as an F32 and an F16 GGUF (tools/gguf/steady_to_gguf.py) and quantized by
# llama.cpp's own quantizer (tools/gguf/quantize_llamacpp.py) to each TYPE, then `steady eval --model
# FILE.gguf` on the same text, beside the checkpoint directory itself. Prints a markdown table
# (docs/benchmarks.md, "GGUF files"). Run it under the CPU lock: it times nothing, but evaluates.
#
#   tools/gguf/perplexity_by_type.sh CHECKPOINT_DIR TEXT OUT_DIR [TYPES]
#       TYPES default: "q8_0 q4_0 q4_1 q5_0 q5_1 q4_k_m q5_k_m q6_k"
# Knobs (environment): STEADY (build/bin/steady), MAX_TOKENS (8192), CONTEXT (256), PEER_CACHE (the
# npm cache of tools/bench/peer_llamacpp.sh, which provides llama.cpp's libraries).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
ckpt=$1 text=$2 out=$3
types=${4:-q8_0 q4_0 q4_1 q5_0 q5_1 q4_k_m q5_k_m q6_k}
steady=${STEADY:-$repo/build/bin/steady}
libs=${PEER_CACHE:-$HOME/.cache/steady-peer-llamacpp}/npm/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
py=/usr/bin/python3
mkdir -p "$out"
name=$(basename "$ckpt")
"$py" "$repo/tools/gguf/steady_to_gguf.py" --model "$ckpt" --out "$out/$name.f32.gguf" --type f32 > /dev/null
"$py" "$repo/tools/gguf/steady_to_gguf.py" --model "$ckpt" --out "$out/$name.f16.gguf" --type f16 > /dev/null
files=("$ckpt" "$out/$name.f32.gguf" "$out/$name.f16.gguf")
for t in $types; do
  "$py" "$repo/tools/gguf/quantize_llamacpp.py" --lib "$libs" --in "$out/$name.f32.gguf" --out "$out/$name.$t.gguf" \
    --type "$t" > /dev/null 2>&1
  files+=("$out/$name.$t.gguf")
done
for f in "${files[@]}"; do
  "$steady" eval --model "$f" --data "$text" --max-tokens "${MAX_TOKENS:-8192}" --context "${CONTEXT:-256}" --json \
    > "$out/$(basename "$f").eval.json" 2> /dev/null
  if [ -f "$f" ]; then "$steady" gguf-info "$f" > "$out/$(basename "$f").info.txt"; fi
done
"$py" - "$out" "${files[@]}" <<'PY'
import collections, json, os, re, sys
out, files = sys.argv[1], sys.argv[2:]
base = None
print("| file | size | matrix types in the file (tensors) | perplexity | vs the checkpoint |")
print("|---|---|---|---|---|")
for f in files:
    r = json.load(open(os.path.join(out, os.path.basename(f) + ".eval.json")))
    ppl = r["perplexity"]
    base = base or ppl
    if os.path.isdir(f):
        size = sum(os.path.getsize(os.path.join(f, x)) for x in os.listdir(f) if x.endswith(".safetensors"))
        kinds = "the checkpoint directory (safetensors)"
    else:
        size = os.path.getsize(f)
        counts = collections.Counter(m.group(1) for m in re.finditer(r"^\s+\S+\.weight\s+(\S+)\s+\[\d+, \d+\]",
                                                                      open(os.path.join(out, os.path.basename(f) + ".info.txt")).read(), re.M))
        kinds = ", ".join(f"{k} ({v})" for k, v in counts.most_common())
    print(f"| {os.path.basename(f)} | {size / 1e6:.2f} MB | {kinds} | {ppl:.3f} | {ppl / base:.4f} |")
PY
