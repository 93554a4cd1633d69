#!/usr/bin/env bash
# Converts the shipped models/tiny-softmax with one recipe per target (docs/conversion.md), in pieces
# of at most PIECE seconds under the shared CPU lock, each piece resuming where the last paused.
#
#   bash tools/train/convert_shipped.sh [TARGET...]   (default: hybrid window16 finetuned)
#
#   hybrid     window_dark, W = 16, 64 dark features over the evicted tokens, M from the calibration
#              statistics (DARKFormer's proposal), a gate per query head
#   window16   sliding_window, W = 16, finetuned alike (the hybrid without its dark state: what the
#              state buys; untrained, W = 16 is 2.7% worse than softmax at 256 tokens, docs/models.md)
#   hybrid_stage1  the hybrid after stage 1 only (attention transfer, no finetune)
#   finetuned  sliding_window, W = 256 = the training context: softmax itself under `steady eval
#              --context 256`, finetuned with the same recipe (the teacher's own gain from the steps)
#   dark       dark, 64 features, M from the calibration statistics (proposal), stages 1 + 2
#   performer  dark with M = I, the same 64 features and seed (stage 1 has nothing to train)
#   slay       slay as models/tiny-slay (2 nodes, 8 anchors, 16 features per node; nothing in stage 1)
#   taylor     taylor P = 3 (training-free; stage 2 finetunes the weights under it)
#   dark_ft, performer_ft   DARKFormer's finetuning comparison (docs/conversion.md): stage 2 only,
#              64 features, the same seed per pair; SEED=N picks the seed (features, batches)
#   dark_id_ft dark_ft with M = I at the start (learned from there): performer's starting point
#   dark_ft_lora, performer_ft_lora   the same with low-rank adapters on q, k, v, o (rank 8) instead of
#              all weights (DARKFormer's limited attention finetuning)
#
# SEED (default 1) other than 1 adds -sSEED to the output's name; EXPORT: the weights' dtype (BF16);
# THREADS: torch threads per run (2); EVAL_EVERY: finetune steps between validations (50); TEACHER:
# another softmax checkpoint to convert (default models/tiny-softmax; the output names stay).
#
# Writes OUT_ROOT/tiny-softmax-to-TARGET (default OUT_ROOT=/tmp/steady-convert). Needs corpus-data/.
# STAGE1, STAGE2 (steps), PIECE (seconds), LOCK (a flock file, or none) and EXTRA (more convert.py flags) from the environment.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
data=${CORPUS_DIR:-$root/corpus-data}
out_root=${OUT_ROOT:-/tmp/steady-convert}
python=${PYTHON:-/usr/bin/python3}
lock=${LOCK:-/tmp/steady-cpu.lock}
locked="flock $lock"
[ "$lock" = none ] && locked=  # the caller holds the lock already
piece=${PIECE:-540}
seed=${SEED:-1}
teacher=${TEACHER:-$root/models/tiny-softmax}
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(hybrid window16 finetuned)
for f in "$data/train.txt" "$data/valid.txt"; do
  [ -f "$f" ] || { echo "convert_shipped: missing $f (tools/corpus/build_corpus.sh)" >&2; exit 1; }
done
mkdir -p "$out_root"
for t in "${targets[@]}"; do
  stage2=${STAGE2:-300}
  stage1=${STAGE1:-100}
  case "$t" in
    hybrid_stage1) stage2=0; spec=(--target window_dark --param window=16 --param features=64 --dark-init proposal) ;;
    hybrid) spec=(--target window_dark --param window=16 --param features=64 --dark-init proposal) ;;
    window16) spec=(--target sliding_window --param window=16) ;;
    finetuned) spec=(--target sliding_window --param window=256) ;;
    dark) spec=(--target dark --param features=64 --dark-init proposal) ;;
    performer) spec=(--target performer --param features=64) ;;
    slay) spec=(--target slay --param nodes=2 --param anchors=8 --param features=16) ;;
    taylor) spec=(--target taylor --param order=3) ;;
    dark_ft) stage1=0; spec=(--target dark --param features=64 --dark-init proposal) ;;
    performer_ft) stage1=0; spec=(--target performer --param features=64) ;;
    dark_id_ft) stage1=0; spec=(--target dark --param features=64 --dark-init identity) ;;
    dark_ft_lora) stage1=0; spec=(--target dark --param features=64 --dark-init proposal --finetune lora) ;;
    performer_ft_lora) stage1=0; spec=(--target performer --param features=64 --finetune lora) ;;
    *) echo "convert_shipped: unknown target $t (hybrid, hybrid_stage1, window16, finetuned, dark, performer," \
         "slay, taylor, dark_ft, performer_ft, dark_id_ft, dark_ft_lora, performer_ft_lora)" >&2; exit 2 ;;
  esac
  out="$out_root/tiny-softmax-to-$t"
  [ "$seed" = 1 ] || out="$out-s$seed"
  [ -d "$out" ] && { echo "convert_shipped: $out exists, skipped"; continue; }
  while :; do
    rc=0
    # shellcheck disable=SC2086
    $locked "$python" "$here/convert.py" --teacher "$teacher" "${spec[@]}" \
      --train "$data/train.txt" --valid "$data/valid.txt" --seq-len 256 \
      --stage1-steps "$stage1" --stage1-batch 8 --stage1-lr 1e-2 \
      --stage2-steps "$stage2" --batch-size 8 --stage2-lr 1e-3 --warmup 10 --seed "$seed" \
      --eval-every "${EVAL_EVERY:-50}" --eval-tokens 16384 --export-dtype "${EXPORT:-BF16}" --golden-vocab-stride 16 --threads "${THREADS:-2}" \
      --max-seconds "$piece" --out "$out" ${EXTRA:-} || rc=$?
    [ "$rc" -eq 75 ] && continue  # paused: the lock goes round, then the next piece resumes
    [ "$rc" -eq 0 ] || exit "$rc"
    break
  done
done
