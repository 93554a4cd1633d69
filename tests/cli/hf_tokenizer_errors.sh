#!/usr/bin/env bash
# A malformed tokenizer.json or tokenizer_config.json is refused at load with a message naming the
# file and the field (issue 25's bad input), by `steady tokenize` and by steady-server, which never
# starts half-loaded. Starts from a small valid byte-level BPE tokenizer.json written here and damages
# one field per case. Needs no reference (tests/cli/hf_tokenizers.sh compares the valid ones).
# Usage: hf_tokenizer_errors.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"

cat > "$tmp/tokenizer.json" <<'JSON'
{"version": "1.0",
 "added_tokens": [{"id": 3, "content": "<s>", "special": true, "lstrip": false, "rstrip": false, "normalized": false, "single_word": false}],
 "normalizer": {"type": "NFC"},
 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
 "post_processor": null,
 "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
 "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
           "fuse_unk": false, "byte_fallback": false, "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}
JSON
mkdir -p "$tmp/good"
cp "$tmp/tokenizer.json" "$tmp/good/"
if [ "$(printf abab | "$bin/steady" tokenize --model "$tmp/good")" = '{"ids":[2,2]}' ]; then
  pass "the undamaged tokenizer.json encodes"
else
  fail "the undamaged tokenizer.json: $(printf abab | "$bin/steady" tokenize --model "$tmp/good" 2>&1)"
fi

# damage NAME PYTHON EXPECTED: tokenizer.json changed by PYTHON (on j) must be refused with EXPECTED
# after the file's path.
damage() {
  mkdir -p "$tmp/$1"
  /usr/bin/python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(j, open(sys.argv[3], 'w'))" "$tmp/tokenizer.json" "$2" "$tmp/$1/tokenizer.json"
  expect_refusal "$1" "$tmp/$1/tokenizer.json: $3"
}
expect_refusal() {  # NAME EXPECTED
  if printf abab | "$bin/steady" tokenize --model "$tmp/$1" > /dev/null 2> "$tmp/err.txt"; then
    fail "$1: accepted"
  elif grep -qF -- "$2" "$tmp/err.txt"; then
    pass "$1: $(head -n 1 "$tmp/err.txt" | sed "s|$tmp/||")"
  else
    fail "$1: expected '$2', got: $(head -n 1 "$tmp/err.txt")"
  fi
}
damage unknown-model "j['model']['type'] = 'WordPiece'" 'model.type: model "WordPiece" is not supported'
damage unknown-normalizer "j['normalizer'] = {'type': 'Mystery'}" 'normalizer.type: normalizer "Mystery" is not supported'
damage unknown-pre-tokenizer "j['pre_tokenizer'] = {'type': 'Mystery'}" 'pre_tokenizer.type:'
damage unknown-decoder "j['decoder'] = {'type': 'Mystery'}" 'decoder.type:'
damage merge-not-a-pair "j['model']['merges'] = [42]" 'model.merges[0]: expected "left right" or [left, right]'
damage merge-outside-vocab "j['model']['merges'] = ['a zz']" 'model.merges[0]: "zz" is not in the vocabulary'
damage vocab-id-not-a-number "j['model']['vocab']['c'] = 'x'" 'model.vocab.c: expected an id'
damage added-token-without-content "j['added_tokens'][0].pop('content')" 'added_tokens[0].content: missing'
damage bad-split-regex \
  "j['pre_tokenizer'] = {'type': 'Split', 'pattern': {'Regex': '(?<=a'}, 'behavior': 'Isolated', 'invert': False}" \
  'pre_tokenizer.pattern.Regex: regex:'
mkdir -p "$tmp/not-json"
echo '{"model": ' > "$tmp/not-json/tokenizer.json"
expect_refusal not-json "$tmp/not-json/tokenizer.json: not valid JSON"
mkdir -p "$tmp/bad-config"
cp "$tmp/tokenizer.json" "$tmp/bad-config/"
echo '{"bos_token": 5}' > "$tmp/bad-config/tokenizer_config.json"
expect_refusal bad-config "$tmp/bad-config/tokenizer_config.json: bos_token:"

# The server refuses such a directory at start, naming the same file and field, and does not listen.
"$bin/steady" init --out "$tmp/model" --preset tiny --seed 1 > /dev/null 2>&1
rm -f "$tmp/model/tokenizer.model"
cp "$tmp/unknown-model/tokenizer.json" "$tmp/model/"
if timeout 60 "$bin/steady-server" --model "$tmp/model" --port 0 --state-memory 16M > "$tmp/server.out" 2>&1; then
  fail "steady-server started on a malformed tokenizer.json"
elif grep -qF "$tmp/model/tokenizer.json: model.type" "$tmp/server.out" && ! grep -q 'listening on' "$tmp/server.out"; then
  pass "steady-server refuses it at start: $(grep -F 'tokenizer.json' "$tmp/server.out" | head -n 1 | sed "s|$tmp/||")"
else
  fail "steady-server on a malformed tokenizer.json: $(tail -n 3 "$tmp/server.out")"
fi
finish hf_tokenizer_errors
