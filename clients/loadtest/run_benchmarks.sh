#!/usr/bin/env bash
# The "Multi-turn sessions and concurrency" benchmark of docs/benchmarks.md: one random tiny model,
# served once with constant-size Taylor state and once as softmax (the same binary and weights),
# multi-turn sessions on both, and a closed-loop concurrency sweep on the Taylor server.
# Usage: clients/loadtest/run_benchmarks.sh OUT_DIR   (from the source root, after the build)
# Writes OUT_DIR/*.json (steady-loadtest reports) and OUT_DIR/*.txt (their tables).
set -euo pipefail
out=$1
bin=build/bin
mkdir -p "$out"
tmp=$(mktemp -d)
server_pid=""
stop_server() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2> /dev/null; then
    kill -TERM "$server_pid" 2> /dev/null || true
    wait "$server_pid" 2> /dev/null || true
  fi
  server_pid=""
}
trap 'stop_server; rm -rf "$tmp"' EXIT

# start_server ARGS...: steady-server on a free port; sets server_pid and addr.
start_server() {
  "$bin/steady-server" --model "$tmp/model" --port 0 --state-memory 1G "$@" 2> "$tmp/server.log" &
  server_pid=$!
  local port=""
  for _ in $(seq 300); do
    port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/server.log")
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { cat "$tmp/server.log"; exit 1; }
  addr=127.0.0.1:$port
}

"$bin/steady" init --out "$tmp/model" --preset tiny --tokenizer tests/data/tokenizer/tokenizer.model > /dev/null

# Multi-turn: 4 sessions x 50 turns, 64 prompt tokens and 16 output tokens per turn.
for variant in taylor softmax; do
  if [ "$variant" = taylor ]; then start_server --mechanism taylor --order 2; else start_server; fi
  "$bin/steady-loadtest" --addr "$addr" --sessions 4 --turns 50 --prompt-tokens fixed:64 --output-tokens fixed:16 \
    --seed 1 --timeout 120 --label "$variant" --json "$out/multiturn_$variant.json" | tee "$out/multiturn_$variant.txt"
  stop_server
done

# Closed-loop concurrency sweep on the Taylor server: max(128, 8 x concurrency) requests per point.
start_server --mechanism taylor --order 2
for c in 1 2 4 8 16 32 64; do
  n=$((8 * c > 128 ? 8 * c : 128))
  "$bin/steady-loadtest" --addr "$addr" --concurrency "$c" --requests "$n" --prompt-tokens fixed:64 \
    --output-tokens fixed:16 --seed 1 --timeout 120 --slo-ttft-ms 500 --slo-tpot-ms 50 --label taylor \
    --json "$out/concurrency_$c.json" | tee "$out/concurrency_$c.txt"
done
stop_server
