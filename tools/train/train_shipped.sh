#!/usr/bin/env bash
# Trains the shipped checkpoints models/tiny-<mechanism> with one recipe (same shape, data order, steps
# and optimizer for every mechanism; docs/models.md).
#
#   bash tools/train/train_shipped.sh [MECHANISM...]     (default: softmax slay dark performer sliced_relu)
#
# Runs the mechanisms one after another; start two invocations with disjoint lists to use two cores.
# Needs corpus-data/ (tools/corpus/build_corpus.sh and train_tokenizer.sh). STEPS, OUT_ROOT and
# EXTRA (more train.py flags, e.g. "--device cuda") can be set in the environment.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
data=${CORPUS_DIR:-$root/corpus-data}
out_root=${OUT_ROOT:-$root/models}
steps=${STEPS:-400}
python=${PYTHON:-/usr/bin/python3}
mechanisms=("$@")
[ ${#mechanisms[@]} -eq 0 ] && mechanisms=(softmax slay dark performer sliced_relu)
for f in "$data/train.txt" "$data/valid.txt" "$data/tokenizer/tokenizer.model"; do
  [ -f "$f" ] || { echo "train_shipped: missing $f (run tools/corpus/build_corpus.sh and train_tokenizer.sh)" >&2; exit 1; }
done
mkdir -p "$out_root"
for m in "${mechanisms[@]}"; do
  name=${m%_relu}
  echo "train_shipped: $m -> $out_root/tiny-$name ($steps steps)"
  # shellcheck disable=SC2086
  "$python" "$here/train.py" --train "$data/train.txt" --valid "$data/valid.txt" \
    --tokenizer "$data/tokenizer/tokenizer.model" --mechanism "$m" --preset tiny \
    --seq-len 256 --batch-size 16 --steps "$steps" --warmup 40 --lr 3e-3 --logit-bound 3 \
    --eval-every 200 --seed 1 --export-dtype F16 --out "$out_root/tiny-$name" ${EXTRA:-}
done
