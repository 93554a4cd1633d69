#!/usr/bin/env bash
# Steady side by side with llama.cpp's CPU build (npm: node-llama-cpp + @node-llama-cpp/linux-x64).
# Method, caveats and figures: docs/peer-llamacpp.md.
#
#   tools/bench/peer_llamacpp.sh install   # npm packages into $PEER_CACHE (outside the repo)
#   tools/bench/peer_llamacpp.sh check     # tiny-softmax (and a copy without QK-norm) to GGUF; greedy
#                                          # tokens, tokenizer and NLL of both engines compared
#   tools/bench/peer_llamacpp.sh bench     # a random llama1b-shaped checkpoint to GGUF; decode tokens/s
#                                          # at batch 1 and each depth, prefill tokens/s, interleaved runs
#   tools/bench/peer_llamacpp.sh all       # the three in order
#
# Knobs (environment): PEER_CACHE (default ~/.cache/steady-peer-llamacpp), STEADY (build/bin/steady),
# NLC_VERSION (3.22.1), THREADS (all cores), LLAMA_THREADS (llama.cpp's threads; default THREADS),
# DEPTHS (0,1024,8192,32768), STEPS (16), ROUNDS (3),
# PREFILL_TOKENS (256), PRECISIONS ("f32 bf16": the GGUF type and Steady's --cpu-weights, pairwise; q8_0
# pairs with Steady's q8),
# KV (f32: llama.cpp's KV cache type; Steady's is f32), FLASH (on|off|auto for llama.cpp), DATA (text for
# the NLL check; default corpus-data/valid.txt when present), CHECK_TOKENS (greedy tokens per prompt, 256),
# CHECK_THREADS (llama.cpp threads in the check, 1).
# Results (JSON and the markdown table) go to $PEER_CACHE/results/<UTC time>/.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
PEER_CACHE=${PEER_CACHE:-$HOME/.cache/steady-peer-llamacpp}
STEADY=${STEADY:-$REPO/build/bin/steady}
NLC_VERSION=${NLC_VERSION:-3.22.1}
PYTHON=${PYTHON:-/usr/bin/python3}  # needs numpy and sentencepiece (Debian python3-numpy, python3-sentencepiece)
THREADS=${THREADS:-$(nproc)}
DEPTHS=${DEPTHS:-0,1024,8192,32768}
STEPS=${STEPS:-16}
ROUNDS=${ROUNDS:-3}
PREFILL_TOKENS=${PREFILL_TOKENS:-256}
PRECISIONS=${PRECISIONS:-f32 bf16}
KV=${KV:-f32}
FLASH=${FLASH:-off}  # llama.cpp: flash attention on (what its auto picks) is its slow path on this CPU at depth; docs/peer-llamacpp.md
CHECK_TOKENS=${CHECK_TOKENS:-256}
CHECK_THREADS=${CHECK_THREADS:-1}  # llama.cpp threads for the tiny model: 2 threads spend more in synchronisation than in work
DATA=${DATA:-}
if [[ -z $DATA && -f $REPO/corpus-data/valid.txt ]]; then DATA=$REPO/corpus-data/valid.txt; fi

WORK=$PEER_CACHE/work
RESULTS=$PEER_CACHE/results/$(date -u +%Y%m%dT%H%M%SZ)
export PEER_NODE_MODULES=$PEER_CACHE/npm/node_modules PEER_PYTHON=$PYTHON
MJS=$REPO/tools/bench/peer_llamacpp.mjs
GGUF=$REPO/tools/gguf/steady_to_gguf.py

log() { echo "peer_llamacpp: $*" >&2; }

install() {
  if [[ -f $PEER_NODE_MODULES/node-llama-cpp/package.json &&
        $(node -p "require('$PEER_NODE_MODULES/node-llama-cpp/package.json').version") == "$NLC_VERSION" ]]; then
    return
  fi
  log "installing node-llama-cpp@$NLC_VERSION and @node-llama-cpp/linux-x64@$NLC_VERSION into $PEER_CACHE/npm"
  mkdir -p "$PEER_CACHE/npm"
  [[ -f $PEER_CACHE/npm/package.json ]] || echo '{"name": "steady-peer-llamacpp", "private": true}' >"$PEER_CACHE/npm/package.json"
  # --omit=optional: not the CUDA/Vulkan/other-OS prebuilt packages; --ignore-scripts: its postinstall
  # would try to download or build llama.cpp when no prebuilt binary fits, and the prebuilt one is
  # all this needs (getLlama({build: "never"})).
  (cd "$PEER_CACHE/npm" && npm install --no-audit --no-fund --omit=optional --ignore-scripts \
    "node-llama-cpp@$NLC_VERSION" "@node-llama-cpp/linux-x64@$NLC_VERSION")
}

convert() {  # convert MODEL_DIR TYPE OUT
  [[ -f $3 && $3 -nt $1/model.safetensors ]] || "$PYTHON" "$GGUF" --model "$1" --out "$3" --type "$2"
}

check() {
  mkdir -p "$WORK" "$RESULTS"
  local tiny=$REPO/models/tiny-softmax nqk=$WORK/tiny-softmax-no-qk-norm
  "$PYTHON" "$REPO/tools/gguf/without_qk_norm.py" --model "$tiny" --out "$nqk"
  local data_flags=()
  [[ -n $DATA ]] && data_flags=(--data "$DATA")
  # name | checkpoint | GGUF type | Steady --cpu-weights
  local cases=("tiny-softmax.f32|$tiny|f32|f32" "tiny-softmax-no-qk-norm.f32|$nqk|f32|f32"
               "tiny-softmax.f16|$tiny|f16|f32" "tiny-softmax.bf16|$tiny|bf16|bf16" "tiny-softmax.q8_0|$tiny|q8_0|q8")
  for c in "${cases[@]}"; do
    IFS='|' read -r name dir type weights <<<"$c"
    convert "$dir" "$type" "$WORK/$name.gguf"
    node "$MJS" check --steady "$STEADY" --model "$dir" --gguf "$WORK/$name.gguf" --cpu-weights "$weights" \
      --max-tokens "$CHECK_TOKENS" --threads "$CHECK_THREADS" "${data_flags[@]}" >"$RESULTS/check-$name.json"
    "$PYTHON" - "$RESULTS/check-$name.json" "$name" "$weights" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
g = r["prompts"]
nll = r.get("nll")
print(f"{sys.argv[2]} (Steady --cpu-weights {sys.argv[3]}): greedy text identical on {sum(p['identical_text'] for p in g)}/{len(g)} prompts, "
      f"agreeing tokens {[p['agreeing_tokens'] for p in g]} of {[p['generated'] for p in g]}; tokenizer identical on "
      f"{sum(t['identical'] for t in r['tokenizer'])}/{len(r['tokenizer'])} texts"
      + (f"; NLL/token Steady {nll['steady']:.6f} llama.cpp {nll['llama_cpp']:.6f} over {nll['tokens_scored']} tokens" if nll else ""))
EOF
  done
}

bench() {
  mkdir -p "$WORK" "$RESULTS"
  local ckpt=$WORK/llama1b-random
  if [[ ! -f $ckpt/model.safetensors ]]; then
    log "writing a random llama1b-shaped checkpoint (f16) to $ckpt"
    "$STEADY" init --out "$ckpt" --preset llama1b --dtype f16 --seed 1 --tokenizer "$REPO/models/tiny-softmax/tokenizer.model"
  fi
  local outs=()
  for p in $PRECISIONS; do
    convert "$ckpt" "$p" "$WORK/llama1b-random.$p.gguf"
    # q8_0 pairs with Steady's q8: the same 32-value int8 blocks, but an fp32 scale where q8_0 has fp16
    # (and llama.cpp also quantizes the activations to 8 bits), so similar, not identical, weights.
    local weights=$p
    [[ $p == q8_0 ]] && weights=q8
    log "interleaved runs, weights $p, llama.cpp KV $KV"
    node "$MJS" compare --steady "$STEADY" --model "$ckpt" --gguf "$WORK/llama1b-random.$p.gguf" --cpu-weights "$weights" \
      --depths "$DEPTHS" --steps "$STEPS" --rounds "$ROUNDS" --prefill-tokens "$PREFILL_TOKENS" \
      --prefill-chunk "$PREFILL_TOKENS" --threads "$THREADS" --llama-threads "${LLAMA_THREADS:-$THREADS}" --kv "$KV" --flash "$FLASH" --state-dir "$WORK" \
      >"$RESULTS/compare-$p-kv$KV.json"
    outs+=("$RESULTS/compare-$p-kv$KV.json")
  done
  node "$MJS" table "${outs[@]}" | tee "$RESULTS/table.md"
}

case ${1:-all} in
  install) install ;;
  check) install; check ;;
  bench) install; bench ;;
  all) install; check; bench ;;
  *) echo "usage: $0 [install|check|bench|all]" >&2; exit 2 ;;
esac
log "results in $RESULTS"
