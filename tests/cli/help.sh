#!/usr/bin/env bash
# Every program and subcommand explains itself: `--help` prints its usage on stdout and exits 0,
# also after a bad flag; a bad flag alone exits 2 and names the flag.
# Usage: help.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"

# expect_help NAME CMD...: exit 0, stdout starts with "usage: NAME" (NAME as the program calls itself).
expect_help() {
  local name=$1
  shift
  local rc=0
  "$@" > "$tmp/out" 2> "$tmp/err" || rc=$?
  if [ $rc -ne 0 ]; then
    fail "$name: exit $rc: $(head -c 300 "$tmp/err")"
  elif ! head -1 "$tmp/out" | grep -qF "usage: $name"; then
    fail "$name: stdout does not start with 'usage: $name': $(head -c 300 "$tmp/out")"
  else
    pass "$name --help"
  fi
}

# expect_usage_error NAME CMD...: exit 2 and stderr names --no-such-flag.
expect_usage_error() {
  local name=$1
  shift
  local rc=0
  "$@" > "$tmp/out" 2> "$tmp/err" || rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "--no-such-flag" "$tmp/err"; then
    pass "$name: a bad flag exits 2 naming it"
  else
    fail "$name: a bad flag gave exit $rc: $(head -c 300 "$tmp/err")"
  fi
}

expect_help "steady COMMAND" "$bin/steady" --help
for c in generate eval attn init info bench logits gguf-info; do
  expect_help "steady $c" "$bin/steady" "$c" --help
  expect_help "steady $c" "$bin/steady" "$c" --no-such-flag --help
  expect_usage_error "steady $c" "$bin/steady" "$c" --no-such-flag
done

expect_help steady-server "$bin/steady-server" --help
expect_help steady-server "$bin/steady-server" --model /nonexistent -h
expect_usage_error steady-server "$bin/steady-server" --no-such-flag

expect_help steady-cli "$bin/steady-cli" --help
for c in info health generate "sessions create" "sessions list" "sessions get" "sessions delete" "sessions fork" \
    "sessions export" "sessions import"; do
  # shellcheck disable=SC2086  # the command's words split on purpose
  expect_help steady-cli "$bin/steady-cli" $c --help
  grep -qF "  $c" "$tmp/out" || fail "steady-cli $c --help does not show '$c'"
done
expect_usage_error steady-cli "$bin/steady-cli" info --no-such-flag

expect_help steady-loadtest "$bin/steady-loadtest" --help
expect_usage_error steady-loadtest "$bin/steady-loadtest" --no-such-flag

if [ -x "$bin/steady-gateway" ]; then
  expect_help steady-gateway "$bin/steady-gateway" --help
  expect_help steady-gateway "$bin/steady-gateway" -h
else
  echo "skip - steady-gateway was not built (no Go)"
fi

for tool in drift slay_gap sliced_error step_instructions replay_exactness; do
  expect_help "$tool" "$bin/$tool" --help
  expect_usage_error "$tool" "$bin/$tool" --no-such-flag
done
for bench in decode_bench store_bench; do
  [ -x "$bin/$bench" ] || continue
  # Google Benchmark's own usage ("benchmark [--benchmark_list_tests..."), exit 0.
  "$bin/$bench" --help > "$tmp/out" 2>&1 && grep -q "benchmark_filter" "$tmp/out" \
    && pass "$bench --help" || fail "$bench --help: $(head -c 300 "$tmp/out")"
done

# The Python tools (argparse): "usage: NAME.py".
for script in tools/bench/quality_table.py tools/bench/sdpa_compare.py tools/bench/hf_compare.py tools/corpus/extract_sources.py \
    tools/corpus/sentences.py tools/corpus/split_corpus.py tools/plot/plot_reports.py tools/train/evaluate.py \
    tools/train/export.py tools/train/logit_stats.py tools/train/train.py; do
  expect_help "$(basename "$script")" /usr/bin/python3 "$src/$script" --help
done

finish help
