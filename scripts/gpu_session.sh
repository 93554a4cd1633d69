#!/usr/bin/env bash
# Everything issue 6 needs from a lent GPU in one device call (docs/cuda.md): the GPU tests and
# memcheck (scripts/gpu_check.sh), then `steady bench --device cuda` at the llama1b shape for each
# mechanism with CUDA kernels, softmax with its KV cache at long contexts, and PyTorch SDPA beside
# it. Binaries come from a bundle built on a project machine (scripts/gpu_bundle.sh), carried with
# the call. Full outputs under $OUT (default gpu-out); the last lines printed are the summary.
#
#   scripts/gpu_bundle.sh                      # here, before the call
#   run: OUT=$OUT scripts/gpu_session.sh       # on the device, carry ["gpu-bundle"]
#
# QUICK=1 runs the tests and one bench row only. PART=check (tests, memcheck, perplexities) or
# PART=bench (bench rows, SDPA, report) splits it over two calls when one would pass the device's
# 10-minute limit per command (each llama1b bench command spends ~15 s initialising random weights).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
BUNDLE=${BUNDLE:-gpu-bundle}
mkdir -p "$OUT/bench"
export LD_LIBRARY_PATH=$PWD/$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
STEADY=$BUNDLE/bin/steady
start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - start )) s] $*"; }

nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.max.sm,driver_version --format=csv >"$OUT/nvidia-smi.csv" 2>&1
stamp "device: $(tail -n1 "$OUT/nvidia-smi.csv")"

PART=${PART:-all}
check_rc=0
if [[ $PART != bench ]]; then
  # 1. Tests: every CUDA op and the whole model against the CPU, then memcheck.
  BUNDLE=$BUNDLE scripts/gpu_check.sh "$OUT/check" >"$OUT/gpu_check.txt" 2>&1
  check_rc=$?
  stamp "gpu_check rc=$check_rc"
  tail -n 12 "$OUT/gpu_check.txt"

  # 2. The shipped models on the GPU: perplexity through the decode path, cuda (bf16 weights) vs
  # cpu, on 4,096 tokens of English from the repository's own docs.
  cat README.md docs/*.md | head -c 30000 >"$OUT/eval.txt"
  for m in models/tiny-*; do
    for d in cuda cpu; do
      "$STEADY" eval --model "$m" --data "$OUT/eval.txt" --max-tokens 4096 --device "$d" --json \
        >"$OUT/eval-$(basename "$m")-$d.json" 2>&1
    done
  done
  stamp "eval done"
fi
[[ $PART == check ]] && { python3 tools/bench/gpu_report.py "$OUT" | tee "$OUT/report.md"; exit $check_rc; }

# 3. steady bench at the llama1b shape. bench writes one JSON per row.
bench() {  # name, then bench flags
  local name=$1
  shift
  timeout 300 "$STEADY" bench --device cuda --preset llama1b --json "$@" >"$OUT/bench/$name.json" 2>"$OUT/bench/$name.err"
  stamp "bench $name rc=$? $(tail -c 200 "$OUT/bench/$name.err" | tr '\n' ' ')"
}
# Lists of batches and contexts share one random model (its initialisation is the slow part).
bench taylor3 --mechanism taylor --order 3 --batch 64 --context 32768 --steps 20 --prefill-tokens 8192
if [[ -z ${QUICK:-} ]]; then
  bench taylor3-batch --mechanism taylor --order 3 --batch 1,128 --context 32768 --steps 20 --prefill-tokens 32768
  bench taylor3-long --mechanism taylor --order 3 --batch 1 --context 8192,131072 --steps 20 --prefill-tokens 131072
  bench slay --mechanism slay --batch 64 --context 32768 --steps 20 --prefill-tokens 8192
  bench dark --mechanism dark --batch 64 --context 32768 --steps 20 --prefill-tokens 0
  bench taylor2 --mechanism taylor --order 2 --batch 64 --context 32768 --steps 20 --prefill-tokens 0
  bench sliced --mechanism sliced_relu --batch 64 --context 32768 --steps 20 --prefill-tokens 1024
  bench softmax-b1 --batch 1 --context 8192,32768,131072 --steps 20 --prefill-tokens 8192
  bench softmax-b16 --batch 16 --context 32768 --steps 20 --prefill-tokens 0
fi

# 4. PyTorch SDPA (FlashAttention) prefill of the attention part, same shape.
python3 tools/bench/sdpa_compare.py --out "$OUT/sdpa.json" >"$OUT/sdpa.txt" 2>&1
stamp "sdpa rc=$?"

# 5. The summary tables (also written to $OUT/report.md).
python3 tools/bench/gpu_report.py "$OUT" | tee "$OUT/report.md"
exit $check_rc
