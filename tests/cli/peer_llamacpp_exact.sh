#!/usr/bin/env bash
# Exactness against llama.cpp (npm's node-llama-cpp, a CPU build we did not write) on token ids:
# random Hugging Face checkpoints of llama (with and without Llama 3.1 rope scaling), qwen2 and
# qwen3, in f32, bf16 and f16, sharded and not (tools/checkpoints/random_hf.py), converted to GGUF by
# tools/gguf/steady_to_gguf.py; greedy ids identical for 64 tokens from three prompts and the logits
# after each prompt within 1e-4 of their spread; a control (rope scaling against a GGUF without it)
# must differ. All of it is `tools/bench/peer_llamacpp.sh exact` (docs/peer-llamacpp.md).
# The packages go into a cache outside the source tree (~/.cache/steady-peer-llamacpp, or
# $PEER_CACHE). Exit 77 (a visible skip) without node and npm (scripts/install-deps.sh installs them).
# Usage: peer_llamacpp_exact.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"
skip_without_node
export PEER_CACHE=${PEER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/steady-peer-llamacpp}
if STEADY="$bin/steady" PEER_WORK="$tmp/work" PEER_RESULTS="$tmp/results" CHECK_THREADS=1 \
     timeout 900 "$src/tools/bench/peer_llamacpp.sh" exact > "$tmp/out" 2>&1; then
  cat "$tmp/out"
  pass "llama, llama3 rope, qwen2, qwen3: the same greedy ids and logits as llama.cpp (table above)"
else
  cat "$tmp/out"
  fail "llama.cpp and Steady disagree, or the check did not run (above)"
fi
finish peer_llamacpp_exact
