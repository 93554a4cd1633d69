#!/usr/bin/env bash
# Fair steps across tenants, in wall-clock time (docs/security.md, docs/benchmarks.md): tenant B's
# inter-token latency with one stream alone, then while tenant A runs FLOOD streams, with the server
# splitting steps by tenant (--api-keys) and, as the control, without tenants (one group: B waits
# its turn in the round robin). Served as taylor P=2, for each --max-batch.
# Usage: [MODEL=DIR] [REQUESTS=N] [TOKENS=N] tools/bench/tenant_fairness.sh [FLOOD] [MAX_BATCHES]
#   (from the source root, after the build; defaults: models/tiny-softmax, B's 20 requests of 64
#   tokens, 64 streams, "8 64"). The 57M-parameter model of docs/benchmarks.md:
#   {"vocab_size": 8192, "hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 8,
#    "num_attention_heads": 12, "num_key_value_heads": 4, "head_dim": 64, "tie_word_embeddings": true,
#    "attention": {"mechanism": "taylor", "order": 2}, ...the rest as models/tiny-softmax/config.json}
#   build/bin/steady init --out /tmp/midmodel --config mid.json --tokenizer models/tiny-softmax/tokenizer.model
set -euo pipefail
bin=build/bin
flood=${1:-64}
batches=${2:-8 64}
model=${MODEL:-models/tiny-softmax}
requests=${REQUESTS:-20}
tokens=${TOKENS:-64}
tmp=$(mktemp -d)
server_pid=""
flood_pid=""
stop() { for p in "$flood_pid" "$server_pid"; do [ -n "$p" ] && { kill -KILL "$p"; wait "$p"; } 2> /dev/null || true; done; }
trap 'stop; rm -rf "$tmp"' EXIT

cat > "$tmp/keys.json" << EOF
{"tenants": {"a": {"keys_sha256": ["$(printf a-key | sha256sum | cut -d' ' -f1)"]},
             "b": {"keys_sha256": ["$(printf b-key | sha256sum | cut -d' ' -f1)"]}}}
EOF

# start MAX_BATCH [flags...]: sets addr.
start() {
  local batch=$1 port=""
  shift
  "$bin/steady-server" --model "$model" --mechanism taylor --order 2 --port 0 --max-batch "$batch" \
    --state-memory 256M --prefix-cache-memory 0 "$@" 2> "$tmp/server.log" &
  server_pid=$!
  for _ in $(seq 600); do
    port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/server.log")
    [ -n "$port" ] && break
    sleep 0.05
  done
  [ -n "$port" ] || { cat "$tmp/server.log"; exit 1; }
  addr=127.0.0.1:$port
}
# b_stream KEY OUT: one stream of B's; prints its ITL p50 and p99 (ms).
b_stream() {
  local key=()
  [ -n "$1" ] && key=(--api-key "$1")
  "$bin/steady-loadtest" --addr "$addr" "${key[@]}" --concurrency 1 --requests "$requests" --prompt-tokens fixed:16 \
    --output-tokens "fixed:$tokens" --tokens-per-word 1.3 --json "$2" > /dev/null
  /usr/bin/python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["summary"]["itl_ms"]; print("%.2f %.2f" % (s["p50"], s["p99"]))' "$2"
}
# flood KEY: A's streams until killed.
flood() {
  local key=()
  [ -n "$1" ] && key=(--api-key "$1")
  "$bin/steady-loadtest" --addr "$addr" "${key[@]}" --concurrency "$flood" --duration 600 --prompt-tokens fixed:16 \
    --output-tokens fixed:256 --tokens-per-word 1.3 > /dev/null 2>&1 &
  flood_pid=$!
  sleep 3  # every stream decoding
}

echo "| --max-batch | B alone: ITL p50 / p99 (ms) | B beside A's $flood streams, tenants: p50 / p99 | ratio p50 | the same without tenants: p50 / p99 | ratio p50 |"
echo "|---|---|---|---|---|---|"
for batch in $batches; do
  start "$batch" --api-keys "$tmp/keys.json"
  read -r alone_p50 alone_p99 < <(b_stream b-key "$tmp/alone.json")
  flood a-key
  read -r fair_p50 fair_p99 < <(b_stream b-key "$tmp/fair.json")
  stop; flood_pid=""; server_pid=""
  start "$batch"
  flood ""
  read -r shared_p50 shared_p99 < <(b_stream "" "$tmp/shared.json")
  stop; flood_pid=""; server_pid=""
  echo "| $batch | $alone_p50 / $alone_p99 | $fair_p50 / $fair_p99 | $(/usr/bin/python3 -c "print('%.2f' % ($fair_p50 / $alone_p50))") | $shared_p50 / $shared_p99 | $(/usr/bin/python3 -c "print('%.2f' % ($shared_p50 / $alone_p50))") |"
done
