#!/usr/bin/env bash
# The GPU run (docs/cuda.md, "Running it on a GPU"): one device call per PART, each within the
# device's limits. Binaries come from the bundle built here (scripts/gpu_bundle.sh), carried with
# the call; everything else from the tree.
#
#   run: PART=tests scripts/gpu_session.sh        carry ["gpu-bundle"]; then bench, compare, sanitize
#   run: PART=short scripts/gpu_session.sh        the one call a 15-minute device lease has room for
#
# PART: tests (the GPU tests and the shipped models' perplexity, cuda vs cpu), bench (decode at the
# llama1b shape: batch 1..256, constant state vs the softmax KV cache at 1K/32K/128K), compare
# (prefill attention vs PyTorch SDPA at 8K/32K/128K, logits vs Hugging Face transformers, the other
# mechanisms' decode), sanitize (compute-sanitizer memcheck, racecheck, synccheck); a comma list runs
# several in one call. short: the steps of tests and bench that matter most (SHORT_STEPS), within a
# 530 s budget: with the machine's start and the transfers, about what a 15-minute lease holds. Every part starts with `preflight`: the device, the bundle unpacked, cuBLAS
# found among the image's usual CUDA folders (lib64, lib, targets/x86_64-linux/lib, Python's
# nvidia/*/lib, then a search) and every binary loaded, naming what is missing.
#
# The call's budget: GPU_BUDGET_S (default 540, 9 minutes of the device's 10 per command). Each step
# runs under its own timeout, cut to what is left of the budget less RESERVE_S for the report; a
# step with no time left is recorded as not started. $OUT receives 3 files, at most 8 and 2 levels
# as the device returns them: summary.md (written first, the plan with each step's expected time;
# rewritten after every step), logs-PART.tar.gz (every log, re-archived after every step) and
# report.md (the tables for docs/benchmarks.md, tools/bench/gpu_report.py). The summary is printed last.
#
# Other settings: OUT (default gpu-out), BUNDLE (default gpu-bundle/steady-gpu.tar.xz), ONLY=a,b (run
# those steps alone, after preflight), JOBS (tests run side by side, default 4), HF_GENERATOR (a
# command making random Hugging Face checkpoints: tools/bench/hf_compare.py). --plan prints each
# part's steps with their expected and longest times, and runs nothing.
# GPU_DRY_RUN=1: no GPU (tests/cli/gpu_dry_run.sh): the same script end to end on this machine with
# the device steps stubbed: the bundle unpacked and loaded, the tests listed and run (they skip),
# the benchmarks on the CPU at the tiny shape, the sanitizers' test filters checked, the report made.
set -uo pipefail
cd "$(dirname "$0")/.."
export ROOT=$PWD
export DRY=${GPU_DRY_RUN:-0}
export PYTHON=${PYTHON:-python3}  # the image's, with PyTorch and transformers
PART=${PART:-tests}
PART_NAME=$PART
# PART=short: every GPU test, the shipped models' perplexity cuda vs cpu and the headline decode
# rows (batch 1..256 at 32K; constant state against the KV cache at 1K, 32K and 128K: taylor's 32K
# row is the batch step's), in that order.
SHORT_STEPS=ops,backend,backend_cuda,engine,eval,decode_taylor3_batch,decode_taylor3_context,decode_softmax_context
KEEP=
if [[ $PART == short ]]; then
  PART=tests,bench
  KEEP=$SHORT_STEPS
fi
OUT=${OUT:-gpu-out}
BUNDLE=${BUNDLE:-gpu-bundle/steady-gpu.tar.xz}
BUDGET_S=${GPU_BUDGET_S:-$([[ -n $KEEP ]] && echo 530 || echo 540)}
RESERVE_S=${RESERVE_S:-20}
ONLY=${ONLY:-}
PLAN_ONLY=0
[[ ${1:-} == --plan ]] && PLAN_ONLY=1
[[ $BUNDLE == /* ]] || BUNDLE=$ROOT/$BUNDLE
export BUNDLE
if ((DRY)); then
  export DEVICE=cpu PRESET=tiny
else
  export DEVICE=cuda PRESET=llama1b
fi

# --- the steps ---------------------------------------------------------------------------------
# Each runs in a bash of its own (under `timeout`), with $WORK/env.sh sourced; its last line of
# output is the summary's note.

# The device, the bundle, cuBLAS, the binaries' libraries.
preflight() {
  local bad=()
  if ((DRY)); then
    echo "DRY RUN (no GPU; memory as an H100's),81559 MiB,-" > "$LOGS/nvidia-smi.csv"
  elif ! nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$LOGS/nvidia-smi.csv" 2>&1; then
    bad+=("nvidia-smi failed: $(head -c 200 "$LOGS/nvidia-smi.csv")")
  fi
  nvidia-smi 2>&1 | head -n 20 || true
  [[ -f $BUNDLE ]] || { echo "FAIL: no bundle at $BUNDLE (scripts/gpu_bundle.sh here, carry [\"gpu-bundle\"])"; return 1; }
  rm -rf "$WORK/bundle"
  mkdir -p "$WORK/bundle"
  # tar needs xz(1); python3's tarfile needs only its lzma module.
  tar -xJf "$BUNDLE" -C "$WORK/bundle" 2> /dev/null ||
    "$PYTHON" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$BUNDLE" "$WORK/bundle" ||
    { echo "FAIL: cannot unpack $BUNDLE"; return 1; }
  head -n 4 "$WORK/bundle/MANIFEST"
  local need have
  need=$(awk '$1 == "glibc_needed" {print $2}' "$WORK/bundle/MANIFEST")
  have=$(ldd --version 2> /dev/null | head -n1 | grep -o '[0-9][0-9.]*$')
  echo "glibc: this machine $have, the bundle needs $need"
  [[ $(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n1) == "$need" ]] || bad+=("glibc $have, older than the bundle's $need")
  # cuBLAS from the image: links to the first copy found, in a folder of their own, so that the
  # binaries' LD_LIBRARY_PATH holds nothing else (their other libraries come by RUNPATH).
  local libs=() dirs=() base sub sp d l found
  read -r -a libs <<< "$(awk '$1 == "image_libs" {$1 = ""; print}' "$WORK/bundle/MANIFEST")"
  for base in ${CUDA_HOME:-} ${CUDA_PATH:-} /usr/local/cuda /usr/local/cuda-13* /opt/cuda /usr/local/cuda-1*; do
    for sub in lib64 lib targets/x86_64-linux/lib; do dirs+=("$base/$sub"); done
  done
  for sp in $("$PYTHON" -c 'import site, sys; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2> /dev/null); do
    dirs+=("$sp"/nvidia/cu13/lib "$sp"/nvidia/*/lib "$sp"/torch/lib)
  done
  dirs+=(/usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib)
  rm -rf "$WORK/cuda-libs"
  mkdir -p "$WORK/cuda-libs"
  for l in "${libs[@]}"; do
    found=""
    for d in "${dirs[@]}"; do
      [[ -e $d/$l ]] && { found=$d/$l; break; }
    done
    [[ -n $found ]] || found=$(timeout 30 find / -xdev -name "$l" -not -path '/proc/*' 2> /dev/null | head -n1)
    if [[ -n $found ]]; then
      echo "$l: $found"
      ln -sf "$(realpath "$found")" "$WORK/cuda-libs/$l"
    else
      bad+=("$l not found")
    fi
  done
  echo "export LD_LIBRARY_PATH=$WORK/cuda-libs BIN=$WORK/bundle/bin" >> "$WORK/env.sh"
  local f missing
  for f in "$WORK"/bundle/bin/* "$WORK"/bundle/lib/*; do
    missing=$(LD_LIBRARY_PATH=$WORK/cuda-libs ldd "$f" 2>&1 | awk '/not found/ {print $1}' | sort -u | tr '\n' ' ')
    [[ -n $missing ]] && bad+=("$(basename "$f") misses ${missing% }")
  done
  # "no" is a dry run's answer; on the device only "yes" will do.
  local device_line
  device_line=$(LD_LIBRARY_PATH=$WORK/cuda-libs "$WORK/bundle/bin/cuda_ops_test" --gtest_filter='CudaDeviceTest.*' 2>&1 |
    grep -m1 'CUDA device available')
  echo "${device_line:-cuda_ops_test printed no device line}"
  if [[ -z $device_line ]]; then
    bad+=("cuda_ops_test did not run")
  elif ((!DRY)) && [[ $device_line != *": yes"* ]]; then
    bad+=("cuda_ops_test sees no CUDA device")
  fi
  # compute-sanitizer: on PATH, else in the toolkit's folders.
  local sanitizer
  sanitizer=$(command -v compute-sanitizer ||
    ls -d ${CUDA_HOME:-/nonexistent}/bin/compute-sanitizer /usr/local/cuda/bin/compute-sanitizer \
      /usr/local/cuda-1*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2> /dev/null | head -n1)
  if [[ -n $sanitizer ]]; then
    echo "export SANITIZER=$sanitizer" >> "$WORK/env.sh"
    "$sanitizer" --version | tail -n1
  else
    echo "compute-sanitizer: not found (PATH, CUDA_HOME, /usr/local/cuda*/bin)"
  fi
  timeout 60 "$PYTHON" -c 'import torch, transformers; print("python3", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "transformers", transformers.__version__)' 2>&1 | tail -n1
  if ((${#bad[@]} > 0)); then
    echo "FAIL: $(printf '%s; ' "${bad[@]}")"
    return 1
  fi
  echo "$(cut -d, -f1 "$LOGS/nvidia-smi.csv"); cuBLAS from $(dirname "$(readlink "$WORK/cuda-libs/${libs[0]}")"); every binary loads"
}

# run_tests BINARY FILTER: scripts/gpu_check.sh.
run_tests() {
  "$ROOT/scripts/gpu_check.sh" "$BIN/$1" "$2" "$LOGS/tests/$1"
}

# The shipped models' perplexity through the decode path, on the GPU (bf16) and the CPU, on 4,096
# tokens of the repository's own English; each model's CPU eval beside its GPU eval (the device has
# 16 cores). A model whose mechanism has no CUDA kernels (window_dark) is refused by --device cuda:
# counted as refused, not failed. Every eval ends by the step's own deadline (its `timeout` is a
# process group of its own, which the step's timeout would not reach: it would run on into the
# next step's timings).
eval_one() {  # DEVICE MODEL_DIR TOKENS
  local d=$1 m=$2 dev=$1 left
  ((DRY)) && dev=cpu
  left=$((STEP_DEADLINE - $(date +%s) - 2))
  ((left > 120)) && left=120
  ((left >= 1)) || return 124
  timeout "$left" "$BIN/steady" eval --model "$m" --data "$WORK/eval.txt" --max-tokens "$3" --device "$dev" --json \
    > "$LOGS/eval/$(basename "$m")-$d.json" 2> "$LOGS/eval/$(basename "$m")-$d.err"
}
eval_shipped() {
  local m name n=0 failed=0 refused=() tokens=4096 cpu_pid rc_cuda rc_cpu
  ((DRY)) && tokens=128
  mkdir -p "$LOGS/eval"
  cat "$ROOT/README.md" "$ROOT"/docs/*.md | head -c 30000 > "$WORK/eval.txt"
  for m in "$ROOT"/models/*/; do
    [[ -f $m/config.json ]] || continue
    name=$(basename "$m")
    eval_one cpu "$m" "$tokens" &
    cpu_pid=$!
    eval_one cuda "$m" "$tokens"
    rc_cuda=$?
    wait "$cpu_pid"
    rc_cpu=$?
    n=$((n + 2))
    ((rc_cpu == 0)) || failed=$((failed + 1))
    if ((rc_cuda != 0)) && grep -q "no CUDA kernels" "$LOGS/eval/$name-cuda.err"; then
      refused+=("$name")
    elif ((rc_cuda != 0)); then
      failed=$((failed + 1))
    fi
  done
  echo "$((n - failed - ${#refused[@]})) of $n evals ran (eval/*.json)${refused:+; refused by --device cuda (no kernels for their mechanism): ${refused[*]}}"
  ((failed == 0))
}

# bench NAME FLAGS...: `steady bench` at the llama1b shape on the GPU, one JSON report per line.
bench() {
  local name=$1
  shift
  local args=("$@")
  ((DRY)) && mapfile -t args < <("$PYTHON" "$ROOT/tools/bench/gpu_report.py" --dry-args "${args[@]}")
  mkdir -p "$LOGS/bench"
  echo "steady bench --device $DEVICE --preset $PRESET --json ${args[*]}"
  "$BIN/steady" bench --device "$DEVICE" --preset "$PRESET" --json "${args[@]}" > "$LOGS/bench/$name.json" \
    2> "$LOGS/bench/$name.err"
  local rc=$?
  tail -n 3 "$LOGS/bench/$name.err"
  "$PYTHON" "$ROOT/tools/bench/gpu_report.py" --brief "$LOGS/bench/$name.json"
  return $rc
}

# PyTorch's SDPA (FlashAttention) causal prefill of one layer's attention at the llama1b shape.
sdpa() {
  local extra=()
  ((DRY)) && extra=(--device cpu --lengths 256,512 --reps 1)
  "$PYTHON" -c 'import torch' 2> /dev/null || { echo "no PyTorch on this python3"; return 77; }
  env -u LD_LIBRARY_PATH PYTHONUNBUFFERED=1 "$PYTHON" "$ROOT/tools/bench/sdpa_compare.py" --out "$LOGS/sdpa.json" "${extra[@]}"
}

# Steady's logits against Hugging Face transformers' own Llama/Qwen on random checkpoints.
hf() {
  local extra=(--device "$DEVICE")
  ((DRY)) && extra+=(--tiny)
  [[ -n ${HF_GENERATOR:-} ]] && extra+=(--generator "$HF_GENERATOR")
  # PyTorch loads its own CUDA libraries: the folder of the toolkit's goes to Steady's binary alone.
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$LD_LIBRARY_PATH" "$BIN/steady" > "$WORK/steady-run"
  chmod +x "$WORK/steady-run"
  env -u LD_LIBRARY_PATH PYTHONUNBUFFERED=1 "$PYTHON" "$ROOT/tools/bench/hf_compare.py" --steady "$WORK/steady-run" \
    --work "$WORK/hf" --out "$LOGS/hf_compare.json" "${extra[@]}"
}

# sanitize TOOL BINARY FILTER [TOOL FLAGS...]: compute-sanitizer over a test binary's filtered tests.
sanitize() {
  local tool=$1 binary=$2 filter=$3
  shift 3
  local n
  n=$("$BIN/$binary" --gtest_filter="$filter" --gtest_list_tests | grep -c '^  ')
  ((n > 0)) || { echo "the filter '$filter' selects no test of $binary"; return 1; }
  if ((DRY)); then
    echo "dry run: would run compute-sanitizer --tool $tool${*:+ $*} over $n tests of $binary"
    return 0
  fi
  [[ -n ${SANITIZER:-} ]] || { echo "compute-sanitizer was not found (preflight's log says where it looked)"; return 1; }
  STEADY_CUDA_SYNC_CHECK=1 "$SANITIZER" --tool "$tool" --error-exitcode 99 "$@" "$BIN/$binary" \
    --gtest_filter="$filter"
  local rc=$?
  echo "$n tests of $binary under $tool: rc $rc"
  return $rc
}

export -f preflight run_tests eval_one eval_shipped bench sdpa hf sanitize

# --- the parts ---------------------------------------------------------------------------------
# step NAME EXPECTED_S TIMEOUT_S COMMAND...: in order of importance within each part (a part cut
# short by its budget loses its last steps).
plan() {
  step preflight 20 150 preflight
  local p
  for p in ${PART//,/ }; do
    case $p in
      tests)
        step ops 40 180 run_tests cuda_ops_test '*'
        step backend 90 300 run_tests backend_test '*Cuda*'
        step backend_cuda 60 240 run_tests backend_cuda_test '*'
        step engine 20 120 run_tests engine_test '*Cuda*'
        step eval 45 150 eval_shipped
        ;;
      bench)
        step decode_taylor3_batch 80 180 bench decode_taylor3_batch --mechanism taylor --order 3 \
          --batch 1,4,16,64,128,256 --context 32768 --steps 20 --prefill-tokens 0
        # 32K: decode_taylor3_batch's batch-1 row (gpu_report.py pairs rows by context across steps).
        step decode_taylor3_context 20 90 bench decode_taylor3_context --mechanism taylor --order 3 --batch 1 \
          --context 1024,131072 --steps 10 --prefill-tokens 0
        step decode_softmax_context 75 180 bench decode_softmax_context --batch 1 --context 1024,32768,131072 \
          --steps 20 --prefill-tokens 0
        step decode_softmax_batch16 45 150 bench decode_softmax_batch16 --batch 16 --context 32768 --steps 20 \
          --prefill-tokens 0
        step decode_softmax_f32kv 35 120 bench decode_softmax_f32kv --cuda-kv f32 --batch 1 --context 32768 \
          --steps 20 --prefill-tokens 0
        ;;
      compare)
        step prefill_taylor3 90 200 bench prefill_taylor3 --mechanism taylor --order 3 --batch 1 --context 1024 \
          --steps 3 --prefill-tokens 8192,32768,131072
        step sdpa 45 120 sdpa
        step prefill_softmax 80 200 bench prefill_softmax --batch 1 --context 1024 --steps 3 \
          --prefill-tokens 8192,32768
        step hf_compare 60 180 hf
        step decode_taylor2_batch64 35 100 bench decode_taylor2_batch64 --mechanism taylor --order 2 --batch 64 \
          --context 32768 --steps 20 --prefill-tokens 0
        step decode_slay_batch64 35 100 bench decode_slay_batch64 --mechanism slay --batch 64 --context 32768 \
          --steps 20 --prefill-tokens 0
        step decode_dark_batch64 35 100 bench decode_dark_batch64 --mechanism dark --batch 64 --context 32768 \
          --steps 20 --prefill-tokens 0
        ;;
      sanitize)
        # The *Long* kernel tests (thousands of tokens) would take the sanitizers minutes each.
        step memcheck_ops 90 180 sanitize memcheck cuda_ops_test '*:-*Long*' --leak-check full
        step racecheck_attention 90 150 sanitize racecheck cuda_ops_test 'CudaAttention*:-*Long*' --racecheck-report hazard
        step synccheck_attention 40 90 sanitize synccheck cuda_ops_test 'CudaAttention*:-*Long*'
        step memcheck_backend 120 200 sanitize memcheck backend_test \
          '*Fp32MatchesTheCpuBackend/taylor3:*Fp32MatchesTheCpuBackend/softmax:*Fp32MatchesTheCpuBackend/dark:*Fp32MatchesTheCpuBackend/sliced_relu:*GraphReplays*:*ChunkedPrefill*'
        step memcheck_backend_cuda 60 150 sanitize memcheck backend_cuda_test '*SplitDecode*:*BucketsAboveEight*'
        ;;
      *)
        echo "gpu_session: unknown PART '$p' (tests, bench, compare, sanitize, short)" >&2
        exit 2
        ;;
    esac
  done
}

# --- the runner --------------------------------------------------------------------------------
names=() expects=() limits=() results=() seconds=() notes=()
PLANNING=1
step() {
  [[ -n $KEEP && $1 != preflight && ",$KEEP," != *",$1,"* ]] && return
  if ((PLANNING)); then
    names+=("$1")
    expects+=("$2")
    limits+=("$3")
    results+=(PENDING)
    seconds+=("")
    notes+=("")
    return
  fi
  local name=$1 limit=$3
  shift 3
  local i
  for i in "${!names[@]}"; do [[ ${names[$i]} == "$name" ]] && break; done
  if [[ -n $ONLY && $name != preflight && ",$ONLY," != *",$name,"* ]]; then
    results[i]=SKIP notes[i]="not in ONLY=$ONLY"
    return
  fi
  local left=$((DEADLINE - $(date +%s) - RESERVE_S))
  if ((left < 10)); then
    results[i]=SKIP notes[i]="not started: the call's ${BUDGET_S} s budget is spent"
    write_summary
    return
  fi
  ((limit > left)) && limit=$left
  results[i]=RUNNING notes[i]="limit ${limit} s"
  write_summary
  progress "$name: started, limit ${limit} s"
  local t0 rc note
  t0=$(date +%s)
  STEP_DEADLINE=$((t0 + limit)) timeout -k 10 "$limit" bash -c 'source "$WORK/env.sh"; "$@"' _ "$@" \
    > "$LOGS/$name.log" 2>&1
  rc=$?
  seconds[i]=$(($(date +%s) - t0))
  # A sanitizer reporting the same fault in a loop can write gigabytes: keep both ends (the archive
  # must stay under the 16 MiB a returned file may have).
  if (($(stat -c %s "$LOGS/$name.log") > 8000000)); then
    { head -c 4000000 "$LOGS/$name.log"; echo; echo "[... cut to its first and last 4 MB ...]"; tail -c 4000000 "$LOGS/$name.log"; } \
      > "$LOGS/$name.log.cut"
    mv "$LOGS/$name.log.cut" "$LOGS/$name.log"
  fi
  note=$(grep -v '^[[:space:]]*$' "$LOGS/$name.log" | tail -n1 | cut -c1-400 | tr '|' '/')
  case $rc in
    0) results[i]=PASS ;;
    77) results[i]=SKIP ;;
    124 | 137) results[i]=TIMEOUT note="killed at its ${limit} s limit; last: $note" ;;
    *) results[i]=FAIL note="rc $rc: $note" ;;
  esac
  notes[i]=$note
  write_summary
  archive
  progress "$name: ${results[i]} in ${seconds[i]} s: $note"
}

progress() { echo "[$(($(date +%s) - START)) s] $*"; }

write_summary() {
  local i device
  device=$(head -n1 "$LOGS/nvidia-smi.csv" 2> /dev/null || echo "not yet seen")
  {
    echo "# GPU run: PART=$PART_NAME$( ((DRY)) && echo ' (dry run, no GPU)')"
    echo
    echo "- started $(date -u -d "@$START" +%Y-%m-%dT%H:%M:%SZ), elapsed $(($(date +%s) - START)) s of a ${BUDGET_S} s budget"
    echo "- device: $device"
    echo "- bundle: $(head -n1 "$WORK/bundle/MANIFEST" 2> /dev/null || echo 'not unpacked yet')"
    echo "- logs: $ARCHIVE_NAME (each step's log; tests/<binary>/<test>.txt; bench/*.json); tables: report.md"
    echo
    echo "| step | result | seconds | expected | note |"
    echo "|---|---|---|---|---|"
    for i in "${!names[@]}"; do
      echo "| ${names[$i]} | ${results[$i]} | ${seconds[$i]} | ${expects[$i]} | ${notes[$i]} |"
    done
  } > "$OUT/summary.md.tmp"
  mv "$OUT/summary.md.tmp" "$OUT/summary.md"
}

# Every log in one archive; past 15 MB (a returned file may have 16 MiB) every log over 1 MB keeps
# its first and last 500 KB.
archive() {
  tar -czf "$OUT/$ARCHIVE_NAME.tmp" -C "$WORK" logs 2> /dev/null || return
  if (($(stat -c %s "$OUT/$ARCHIVE_NAME.tmp") > 15000000)); then
    rm -rf "$WORK/cut"
    mkdir -p "$WORK/cut"
    cp -r "$LOGS" "$WORK/cut/logs"
    find "$WORK/cut/logs" -type f -size +1M -exec sh -c 'for f; do
      { head -c 500000 "$f"; printf "\n[... cut to its first and last 500 KB: the archive was over 15 MB ...]\n"; tail -c 500000 "$f"; } > "$f.cut" && mv "$f.cut" "$f"
    done' _ {} +
    tar -czf "$OUT/$ARCHIVE_NAME.tmp" -C "$WORK/cut" logs 2> /dev/null || return
    rm -rf "$WORK/cut"
  fi
  mv "$OUT/$ARCHIVE_NAME.tmp" "$OUT/$ARCHIVE_NAME"
}

# What the device tool returns of $OUT: at most 8 files, 2 folders down, plain names, 16 MiB each.
check_out() {
  local files deep odd big
  files=$(find "$OUT" -type f | wc -l)
  deep=$(find "$OUT" -mindepth 4 | head -n3 | tr '\n' ' ')
  odd=$( (find "$OUT" -mindepth 1 ! -type f ! -type d; find "$OUT" -mindepth 1 -printf '%f\n' | grep -v '^[A-Za-z0-9._-]*$') | head -n3 | tr '\n' ' ')
  big=$(find "$OUT" -type f -size +16M | head -n3 | tr '\n' ' ')
  if ((files > 8)) || [[ -n $deep$odd$big ]]; then
    echo "FAIL: \$OUT would not come back whole: $files files (8 at most)${deep:+; too deep: $deep}${odd:+; odd: $odd}${big:+; over 16 MiB: $big}"
    return 1
  fi
  echo "$files files, all of them come back"
}

PLANNING=1
plan
if ((PLAN_ONLY)); then
  total=0
  for i in "${!names[@]}"; do
    printf '%-26s expected %4s s, at most %4s s\n' "${names[$i]}" "${expects[$i]}" "${limits[$i]}"
    total=$((total + expects[i]))
  done
  echo "PART=$PART_NAME expected $total s of a $BUDGET_S s budget"
  exit 0
fi

START=$(date +%s)
DEADLINE=$((START + BUDGET_S))
if ((DRY)); then
  WORK=$(mktemp -d)
else
  WORK=${GPU_WORK:-/tmp/steady-gpu}
  rm -rf "$WORK"
  mkdir -p "$WORK"
fi
trap '((DRY)) && rm -rf "$WORK"' EXIT
export WORK LOGS=$WORK/logs
mkdir -p "$LOGS" "$OUT"
: > "$WORK/env.sh"
ARCHIVE_NAME=logs-${PART_NAME//,/-}.tar.gz
write_summary
PLANNING=0
plan

"$PYTHON" "$ROOT/tools/bench/gpu_report.py" "$LOGS" > "$OUT/report.md" 2> "$LOGS/report.err" ||
  echo "gpu_report failed: $(tail -n1 "$LOGS/report.err")" >> "$OUT/report.md"
archive
layout=$(check_out)
layout_rc=$?
write_summary
{
  echo
  echo "- \$OUT: $layout"
  echo "- finished after $(($(date +%s) - START)) s"
} >> "$OUT/summary.md"
echo
cat "$OUT/report.md"
echo
cat "$OUT/summary.md"
status=$layout_rc
for r in "${results[@]}"; do [[ $r == PASS || $r == SKIP ]] || status=1; done
exit $status
