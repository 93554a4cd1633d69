#!/usr/bin/env bash
# Regenerates tests/data/tokenizer/tokenizer.model: a small sentencepiece BPE model used by tests and
# by `steady init` checkpoints (the demo falls back to one when models/ is absent). Trained on the license
# texts every Debian system ships (text only the tests need to tokenize something real).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat /usr/share/common-licenses/{GPL-3,Apache-2.0,LGPL-3,MPL-2.0,Artistic} > "$tmp/text.txt"
spm_train --input="$tmp/text.txt" --model_prefix="$tmp/tok" --vocab_size=512 --model_type=bpe \
  --character_coverage=1.0 --byte_fallback=true --bos_id=1 --eos_id=2 --unk_id=0 --pad_id=-1 \
  --normalization_rule_name=identity --remove_extra_whitespaces=false --minloglevel=2 > /dev/null 2>&1
cp "$tmp/tok.model" "$here/tokenizer.model"
echo "wrote $here/tokenizer.model"
