#!/usr/bin/env bash
# The demo: installs what is missing, builds, serves the default model with steady-server and streams
# a generation through steady-cli (one session, two turns, then a fork).
# The default model is models/tiny-softmax (trained on the public-domain corpus, docs/models.md) served
# with constant-size Taylor state; without models/ (STEADY_DEMO_MODEL pointing nowhere) it falls back
# to a randomly initialised tiny checkpoint: the text is noise, but every stage still runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
model=${STEADY_DEMO_MODEL:-models/tiny-softmax}
if [ ! -f "$model/model.safetensors" ]; then
  model=build/demo-model
  ./build/bin/steady init --out "$model" --preset tiny --tokenizer tests/data/tokenizer/tokenizer.model --seed 1
fi
port=${STEADY_DEMO_PORT:-50051}
sessions=$(mktemp -d)
./build/bin/steady-server --model "$model" --mechanism taylor --order 3 --port "$port" \
  --state-memory 67108864 --session-dir "$sessions" --metrics-port $((port + 1)) &
server=$!
gateway=
trap 'kill $server $gateway 2> /dev/null; wait $server $gateway 2> /dev/null; rm -rf "$sessions"' EXIT
cli() { ./build/bin/steady-cli --addr "127.0.0.1:$port" "$@"; }
for _ in $(seq 50); do cli health > /dev/null 2>&1 && break; sleep 0.2; done
echo "== $model served with constant-size Taylor state (steady-server on :$port)"
cli info > "$sessions/info.json"
grep -m1 '"mechanism"' "$sessions/info.json"; grep -m1 '"state_bytes_per_session"' "$sessions/info.json"
cli sessions create --id demo > /dev/null
echo "== turn 1"
cli generate --session demo --prompt "Call me Ishmael. Some years ago" --max-tokens 40 --temperature 0.8 --top-p 0.95 --seed 1
echo "== turn 2 (appended to the same session state)"
cli generate --session demo --prompt " And the whale" --max-tokens 40 --temperature 0.8 --top-p 0.95 --seed 2
cli sessions fork demo --new-id demo-fork > /dev/null
echo "== sessions (the state costs the same bytes at any length)"
cli sessions list | grep -E '"(session_id|position|state_bytes)"'
if [ -x build/bin/steady-gateway ]; then
  ./build/bin/steady-gateway --grpc-addr "127.0.0.1:$port" --http-port $((port + 2)) &
  gateway=$!
  for _ in $(seq 50); do curl -sf "127.0.0.1:$((port + 2))/healthz" > /dev/null && break; sleep 0.2; done
  echo "== HTTP/JSON through steady-gateway: curl -N -d '{...}' 127.0.0.1:$((port + 2))/v1/generate"
  curl -sN -d '{"session_id": "demo", "prompt": " Then he said", "max_tokens": 12, "temperature": 0.8, "top_p": 0.95, "seed": 3}' "127.0.0.1:$((port + 2))/v1/generate"
  echo "== OpenAI-compatible: POST 127.0.0.1:$((port + 2))/v1/chat/completions (any OpenAI client works)"
  curl -s -d '{"model": "tiny-softmax", "messages": [{"role": "user", "content": "Tell me of the sea."}], "max_tokens": 24, "seed": 4}' \
    "127.0.0.1:$((port + 2))/v1/chat/completions"
  echo "(the web playground: http://127.0.0.1:$((port + 2))/ while a gateway runs)"
fi
echo "== metrics: curl 127.0.0.1:$((port + 1))/metrics"
curl -s "127.0.0.1:$((port + 1))/metrics" | grep -E '^steady_(generated_tokens_total|sessions)' || true
