#!/usr/bin/env bash
# Speculative decoding with a draft model (docs/speculative.md) through the binaries: `steady generate
# --speculative draft --draft-model DIR` gives plain decoding's text (greedy and seeded), a draft
# with another tokenizer is refused at load by steady generate and steady-server, the flags go
# together, and a server with --speculative draft answers with plain decoding's text and counts
# its drafts in /metrics.
# Usage: speculative_draft.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"
steady=$bin/steady
tok=$src/tests/data/tokenizer/tokenizer.model
"$steady" init --out "$tmp/target" --preset tiny --tokenizer "$tok" --seed 1 > /dev/null
"$steady" init --out "$tmp/draft" --preset tiny --tokenizer "$tok" --seed 2 > /dev/null
# Another tokenizer (the shipped models' own, trained on the corpus).
"$steady" init --out "$tmp/foreign" --preset tiny --tokenizer "$src/models/tiny-softmax/tokenizer.model" > /dev/null

gen() { "$steady" generate --model "$tmp/target" --max-tokens 24 --ignore-eos --json "$@"; }
for sampling in "" "--temperature 0.9 --seed 5"; do
  # (word splitting of $sampling is wanted)
  # shellcheck disable=SC2086
  plain=$(gen --prompt "This License applies to any" $sampling 2> /dev/null)
  for draft in "$tmp/draft" "$tmp/target"; do
    # shellcheck disable=SC2086
    spec=$(gen --prompt "This License applies to any" $sampling --speculative draft --draft-model "$draft" \
      --draft-tokens 3 2> "$tmp/err")
    if [ -n "$plain" ] && [ "$spec" = "$plain" ] && grep -q "speculative draft: [1-9][0-9]* drafted" "$tmp/err"; then
      pass "draft ${draft##*/} ${sampling:-greedy}: plain decoding's ids and text"
    else
      fail "draft ${draft##*/} ${sampling:-greedy}: '$spec' vs '$plain' ($(cat "$tmp/err"))"
    fi
  done
done
# The target's own weights as the draft, greedy: (nearly) every draft accepted.
gen --prompt "This License applies to any" --speculative draft --draft-model "$tmp/target" > /dev/null 2> "$tmp/err"
rate=$(sed -n 's/.*accepted (\([0-9]*\)%).*/\1/p' "$tmp/err")
[ "${rate:-0}" -ge 90 ] && pass "its own weights as the draft: $rate% accepted" || fail "self-draft acceptance: $(cat "$tmp/err")"

expect_error "a draft with another tokenizer is refused" "tokenizer differs from the target's" \
  "$steady" generate --model "$tmp/target" --prompt x --speculative draft --draft-model "$tmp/foreign"
expect_error "--speculative draft needs --draft-model" "--speculative draft and --draft-model DIR go together" \
  "$steady" generate --model "$tmp/target" --prompt x --speculative draft
expect_error "--draft-model needs --speculative draft" "--speculative draft and --draft-model DIR go together" \
  "$steady" generate --model "$tmp/target" --prompt x --speculative ngram --draft-model "$tmp/draft"
expect_error "steady-server refuses a draft with another tokenizer" "tokenizer differs from the target's" \
  timeout 60 "$bin/steady-server" --model "$tmp/target" --port 0 --speculative draft --draft-model "$tmp/foreign"

# A server whose default is the draft model: the text of plain decoding, the drafts in /metrics.
"$bin/steady-server" --model "$tmp/target" --port 0 --metrics-port 0 --state-memory 16M \
  --speculative draft --draft-model "$tmp/target" --draft-tokens 4 2> "$tmp/server.log" &
server_pid=$!
started_pids+=("$server_pid")
port=$(wait_for_line "$tmp/server.log" "$server_pid" 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p')
metrics_port=$(sed -n 's|.*metrics on http://127\.0\.0\.1:\([0-9]*\)/metrics.*|\1|p' "$tmp/server.log")
if [ -z "$port" ]; then
  echo "steady-server did not start:"; cat "$tmp/server.log"; exit 1
fi
served=$(timeout 60 "$bin/steady-cli" --addr "127.0.0.1:$port" generate --prompt "This License applies to any" \
  --max-tokens 24 2> /dev/null)
local_text=$("$steady" generate --model "$tmp/target" --prompt "This License applies to any" --max-tokens 24 2> /dev/null)
[ -n "$served" ] && [ "$served" = "$local_text" ] && pass "steady-server --speculative draft: plain decoding's text" \
  || fail "served '$served' vs '$local_text'"
curl -s --max-time 10 "http://127.0.0.1:$metrics_port/metrics" > "$tmp/metrics"
drafted=$(sed -n 's/^steady_speculative_draft_tokens_total \([0-9]*\)$/\1/p' "$tmp/metrics")
steps=$(sed -n 's/^steady_speculative_accepted_per_verify_count \([0-9]*\)$/\1/p' "$tmp/metrics")
[ "${drafted:-0}" -gt 0 ] && [ "${steps:-0}" -gt 0 ] && pass "/metrics: $drafted drafts in $steps verify steps" \
  || fail "/metrics: $(grep speculative "$tmp/metrics")"
finish speculative_draft
