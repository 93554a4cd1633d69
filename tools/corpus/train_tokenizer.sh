#!/usr/bin/env bash
# Trains the sentencepiece BPE tokenizer on the corpus's training split (never on valid.txt).
#
#   bash tools/corpus/train_tokenizer.sh [WORK_DIR] [VOCAB_SIZE]   (defaults: ./corpus-data, 8192)
#
# Writes WORK_DIR/tokenizer/tokenizer.model (+ .vocab). Settings, all chosen so that the engine and
# the trainer see the same ids and decode(encode(x)) == x for any text:
#   BPE, byte_fallback (no <unk> for unseen characters), identity normalization and
#   remove_extra_whitespaces=false (the text is not rewritten), split_digits,
#   unk=0 bos=1 eos=2, no pad. Input is split into sentences first (sentences.py), since spm_train
#   skips lines longer than 4,192 bytes.
# Needs spm_train / spm_encode / spm_decode (Debian: sentencepiece).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(cd "${1:-corpus-data}" && pwd)
vocab=${2:-8192}
threads=${SPM_THREADS:-2}
out="$work/tokenizer"
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$out/sentences.txt"' EXIT

# Fixed paths: spm_train records its input and prefix in the model, which should not depend on a
# temp dir's random name (the same corpus then gives the same tokenizer.model, byte for byte).
python3 "$here/sentences.py" --max-bytes 4000 < "$work/train.txt" > "$out/sentences.txt"
echo "tokenizer: $(wc -l < "$out/sentences.txt") sentences, vocab $vocab"
start=$(date +%s)
(cd "$out" && spm_train --input=sentences.txt --model_prefix=tokenizer --vocab_size="$vocab" \
  --model_type=bpe --character_coverage=0.9999 --byte_fallback=true --split_digits=true \
  --normalization_rule_name=identity --remove_extra_whitespaces=false \
  --bos_id=1 --eos_id=2 --unk_id=0 --pad_id=-1 \
  --input_sentence_size=0 --num_threads="$threads" --minloglevel=1) > "$tmp/spm_train.log" 2>&1 ||
  { tail -20 "$tmp/spm_train.log"; exit 1; }
echo "tokenizer: spm_train took $(( $(date +%s) - start )) s"

# Round trip on the validation split, line by line (spm_encode works per line).
spm_encode --model="$out/tokenizer.model" --output_format=id < "$work/valid.txt" > "$tmp/valid.ids"
spm_decode --model="$out/tokenizer.model" --input_format=id < "$tmp/valid.ids" > "$tmp/valid.dec"
if ! cmp -s "$work/valid.txt" "$tmp/valid.dec"; then
  echo "tokenizer: decode(encode(valid.txt)) differs from valid.txt" >&2
  exit 1
fi
tokens=$(wc -w < "$tmp/valid.ids")
bytes=$(wc -c < "$work/valid.txt")
echo "tokenizer: valid.txt round-trips; $tokens tokens for $bytes bytes ($(python3 -c "print(round($bytes / $tokens, 2))") bytes/token)"
echo "tokenizer: wrote $out/tokenizer.model"
