#!/usr/bin/env bash
# Speculative decoding with a draft model on free text (docs/benchmarks.md, "Speculative decoding"):
# batch-1 decode tokens/s of TARGET plainly and with each DRAFT at K = 2 and 4 (median of REPS runs,
# greedy, --ignore-eos, one thread), the acceptance rate, each draft's own plain decode tokens/s
# (its cost against the target's), and whether the text equals plain decoding's (md5 of stdout).
# A DRAFT named `ngram` is prompt lookup (--speculative ngram: no draft model).
# Usage: draft_bench.sh BIN_DIR TARGET_DIR DRAFT_DIR|ngram... (env: PROMPT, TOKENS (200), REPS (3),
# KS ("2 4"): the draft lengths, FLAGS: more flags for every run of the target, e.g. --cpu-weights bf16)
set -euo pipefail
bin=$1
target=$2
shift 2
prompt=${PROMPT:-"The old man sat by the river and watched the boats go by. He thought about the years"}
tokens=${TOKENS:-200}
reps=${REPS:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# run MODEL [flags...]: one generation; prints "decode_tokens_per_s drafted accepted md5".
run() {
  local model=$1
  shift
  "$bin/steady" generate --model "$model" --prompt "$prompt" --max-tokens "$tokens" --ignore-eos --threads 1 "$@" \
    > "$out/text" 2> "$out/err"
  local speed drafted accepted
  speed=$(sed -n 's/.*decode \([0-9.]*\) tokens\/s.*/\1/p' "$out/err" | tail -n 1)
  drafted=$(sed -n 's/.*: \([0-9]*\) drafted, \([0-9]*\) accepted.*/\1/p' "$out/err")
  accepted=$(sed -n 's/.*: \([0-9]*\) drafted, \([0-9]*\) accepted.*/\2/p' "$out/err")
  echo "$speed ${drafted:-0} ${accepted:-0} $(md5sum < "$out/text" | cut -c1-8)"
}
# median LINES...: the median line by its first field.
median() { printf '%s\n' "$@" | sort -n | sed -n "$(( ($# + 1) / 2 ))p"; }
runs() {
  local lines=()
  for _ in $(seq "$reps"); do lines+=("$(run "$@")"); done
  median "${lines[@]}"
}

# shellcheck disable=SC2086
read -r plain _ _ plain_md5 < <(runs "$target" ${FLAGS:-})
echo "| draft | K | draft alone, tokens/s | tokens/s | vs plain | drafted / accepted | identical text |"
echo "|---|---|---|---|---|---|---|"
echo "| (plain decoding of ${target##*/}) | | | $plain | 1.00x | | |"
for draft in "$@"; do
  if [ "$draft" = ngram ]; then
    alone=
    how=(--speculative ngram)
  else
    read -r alone _ _ _ < <(runs "$draft")
    how=(--speculative draft --draft-model "$draft")
  fi
  for k in ${KS:-2 4}; do
    # shellcheck disable=SC2086  # FLAGS: flags, split on purpose
    read -r speed drafted accepted md5 < <(runs "$target" "${how[@]}" --draft-tokens "$k" ${FLAGS:-})
    rate=$(awk -v a="$accepted" -v d="$drafted" 'BEGIN { printf "%.0f", (d > 0 ? 100 * a / d : 0) }')
    ratio=$(awk -v s="$speed" -v p="$plain" 'BEGIN { printf "%.2f", s / p }')
    same=no
    [ "$md5" = "$plain_md5" ] && same=yes
    echo "| ${draft##*/} | $k | $alone | $speed | ${ratio}x | $drafted / $accepted ($rate%) | $same |"
  done
done
