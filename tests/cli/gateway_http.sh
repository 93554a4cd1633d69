#!/usr/bin/env bash
# steady-gateway (HTTP/JSON) in front of a real steady-server, driven with curl: every route of
# docs/api.md, NDJSON streaming that arrives while tokens are generated, gRPC status -> HTTP status
# with JSON error bodies, /openapi.json and /healthz. CMake registers it only when the gateway is built.
# Usage: gateway_http.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"
"$bin/steady" init --out "$tmp/model" --preset tiny --tokenizer "$src/tests/data/tokenizer/tokenizer.model" \
  --mechanism taylor --order 2 > /dev/null
mkdir -p "$tmp/sessions"
serve_gateway "$bin" "$tmp/model" --state-memory 16M --session-dir "$tmp/sessions"

check "GET /healthz: 200 SERVING" 200 GET /healthz -- 'b["status"] == "SERVING"'
check "GET /v1/model: ModelInfo" 200 GET /v1/model -- \
  'b["mechanism"] == "taylor" and b["vocab_size"] == 512 and int(b["state_bytes_per_session"]) > 0 and int(b["limits"]["max_new_tokens"]) > 0'
check "POST /v1/sessions with an id (zero fields left out)" 200 POST /v1/sessions '{"session_id": "alpha"}' -- \
  'b["session_id"] == "alpha" and "position" not in b and "busy" not in b and b["resident"] is True'
check "POST /v1/sessions without an id: the server picks one" 200 POST /v1/sessions '{}' -- \
  'b["session_id"].startswith("s-")'
check "POST /v1/generate: prefill only" 200 POST /v1/generate \
  '{"session_id": "alpha", "prompt": "This License applies to", "max_tokens": 0}' -- \
  'b["result"]["finish_reason"] == "length" and int(b["result"]["usage"]["session_position"]) > 0'
check "GET /v1/sessions/alpha: position after prefill" 200 GET /v1/sessions/alpha -- 'int(b["position"]) > 0'
alpha_pos=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['position'])" "$tmp/body")
check "POST /v1/sessions/alpha:fork" 200 POST /v1/sessions/alpha:fork '{"new_session_id": "beta"}' -- \
  "b['session_id'] == 'beta' and b['position'] == '$alpha_pos'"
check "POST /v1/sessions/alpha:fork (second fork)" 200 POST /v1/sessions/alpha:fork '{"new_session_id": "gamma"}' -- \
  'b["session_id"] == "gamma"'
check "GET /v1/sessions: ordered by id" 200 GET /v1/sessions -- \
  '[s["session_id"] for s in b["sessions"]] == sorted(s["session_id"] for s in b["sessions"]) and {"alpha", "beta", "gamma"} <= {s["session_id"] for s in b["sessions"]}'
check "DELETE /v1/sessions/gamma" 200 DELETE /v1/sessions/gamma -- 'b == {}'
check "GET /v1/sessions/gamma after delete: 404" 404 GET /v1/sessions/gamma -- \
  '"gamma" in b["message"] and b["code"] == 5'

# Export alpha as NDJSON chunks and import them as delta: the same position.
curl -s --max-time 60 "$url/v1/sessions/alpha:export" > "$tmp/export.jsonl" || true
python3 - "$tmp/export.jsonl" "$tmp/import.jsonl" <<'PY' && pass "GET :export streams base64 chunks" || fail "export: $(head -c 300 "$tmp/export.jsonl")"
import base64, json, sys
chunks = [json.loads(l)["result"]["data"] for l in open(sys.argv[1]) if l.strip()]
assert chunks and sum(len(base64.b64decode(c)) for c in chunks) > 0, chunks
with open(sys.argv[2], "w") as out:
    for i, c in enumerate(chunks):
        out.write(json.dumps({"session_id": "delta" if i == 0 else "", "data": c}) + "\n")
PY
check "POST /v1/sessions:import: the same position" 200 POST /v1/sessions:import "$(cat "$tmp/import.jsonl")" -- \
  "b['session_id'] == 'delta' and b['position'] == '$alpha_pos'"

# Streaming, short: several NDJSON lines, the last one alone with finish_reason and usage, and the
# same text as steady-cli gets over gRPC for the same greedy request on a fork of the same state.
curl -s -N --max-time 60 -X POST "$url/v1/generate" \
  -d '{"session_id": "beta", "prompt": " any program", "max_tokens": 40}' > "$tmp/gen.jsonl" || true
timeout 60 "$bin/steady-cli" --addr "127.0.0.1:$port" generate --session delta --prompt " any program" \
  --max-tokens 40 --json > "$tmp/cli.jsonl" 2> /dev/null || true
python3 - "$tmp/gen.jsonl" "$tmp/cli.jsonl" <<'PY' && pass "POST /v1/generate streams NDJSON lines, same tokens as gRPC" \
  || fail "generate stream: $(head -c 1000 "$tmp/gen.jsonl")"
import json, sys
msgs = [json.loads(l)["result"] for l in open(sys.argv[1])]
assert len(msgs) >= 3, f"only {len(msgs)} lines"
# Unset fields are left out: only the last line has finish_reason and usage.
assert all("finish_reason" not in m and "usage" not in m and m["token_ids"] for m in msgs[:-1]), msgs
assert msgs[-1]["finish_reason"] == "length", msgs[-1]
assert all(json.loads(l)["result"].keys() <= {"text", "token_ids"} for l in open(sys.argv[1]) if "usage" not in l)
assert int(msgs[-1]["usage"]["completion_tokens"]) == 40 == sum(len(m.get("token_ids", [])) for m in msgs), msgs
grpc = [json.loads(l) for l in open(sys.argv[2])]
assert [t for m in msgs for t in m.get("token_ids", [])] == [t for m in grpc for t in m["token_ids"]], (msgs, grpc)
assert "".join(m.get("text", "") for m in msgs) == "".join(m["text"] for m in grpc), (msgs, grpc)
PY

# Streaming, long: the first line must arrive long before the last one is produced. Each line is
# stamped on arrival ($EPOCHREALTIME, no fork); a gateway that buffered the response would deliver
# every line at about the same time, after the whole generation.
t0=$EPOCHREALTIME
curl -s -N --max-time 300 -X POST "$url/v1/generate" -d '{"prompt": "The", "max_tokens": 1000}' |
  while IFS= read -r line; do echo "$EPOCHREALTIME ${#line}"; done > "$tmp/arrivals" || true
awk -v t0="$t0" 'NR == 1 {first = $1 - t0} {last = $1 - t0; n++}
  END {printf "%d lines, first after %.3f s, last after %.3f s\n", n, first, last; exit !(n >= 10 && first * 2 < last)}' \
  "$tmp/arrivals" > "$tmp/timing" && pass "streaming: first line before the end ($(cat "$tmp/timing"))" \
  || fail "streaming is not incremental: $(cat "$tmp/timing")"

# While a Generate runs on a session a second one is refused (FAILED_PRECONDITION: the gateway's
# standard mapping gives 412), and a client that disconnects cancels the generation: the session is
# free again soon after. A long prompt keeps the session busy in prefill for seconds, so the random
# model's end-of-sequence token cannot end the first call early.
python3 -c "import json; print(json.dumps({'session_id': 'alpha', 'max_tokens': 60000,
  'prompt': ' This License applies to any program or other work.' * 4000}))" > "$tmp/long_request.json"
curl -s -N --max-time 300 -X POST "$url/v1/generate" --data-binary @"$tmp/long_request.json" > "$tmp/long.jsonl" &
long_pid=$!
# session_busy: prints True or False (or ? when the call failed).
session_busy() {
  call GET /v1/sessions/alpha > /dev/null
  # (busy is left out when false)
  python3 -c "import json, sys; b = json.load(open(sys.argv[1])); print(b.get('busy', False) if 'session_id' in b else '?')" \
    "$tmp/body" 2> /dev/null || echo "?"
}
for _ in $(seq 300); do [ "$(session_busy)" = True ] && break; sleep 0.1; done
check "Generate on a busy session: 412 FAILED_PRECONDITION" 412 POST /v1/generate \
  '{"session_id": "alpha", "prompt": "x", "max_tokens": 1}' -- 'b["error"]["grpc_code"] == 9 and b["error"]["message"]'
kill "$long_pid" 2> /dev/null || true
wait "$long_pid" 2> /dev/null || true
for _ in $(seq 300); do [ "$(session_busy)" = False ] && break; sleep 0.1; done
[ "$(session_busy)" = False ] && pass "client disconnect cancels the generation (session free again)" \
  || fail "session still busy 30 s after the client disconnected: $(cat "$tmp/body")"

# Errors: gRPC status -> HTTP status, JSON bodies carrying the server's message.
check "unknown session: 404" 404 GET /v1/sessions/nobody -- '"nobody" in b["message"] and b["code"] == 5'
check "Generate on an unknown session: 404" 404 POST /v1/generate '{"session_id": "nobody", "prompt": "x"}' -- \
  'b["error"]["http_code"] == 404 and "nobody" in b["error"]["message"]'
check "temperature NaN: 400 naming the field" 400 POST /v1/generate '{"prompt": "x", "temperature": "NaN"}' -- \
  'b["error"]["message"].startswith("temperature")'
check "temperature 1000: 400" 400 POST /v1/generate '{"prompt": "x", "temperature": 1000}' -- \
  'b["error"]["message"].startswith("temperature")'
check "top_p 2: 400 naming the field" 400 POST /v1/generate '{"prompt": "x", "top_p": 2}' -- \
  'b["error"]["message"].startswith("top_p")'
check "malformed JSON body: 400" 400 POST /v1/sessions '{"session_id": ' -- 'b["code"] == 3 and b["message"]'
check "malformed JSON body on a stream: 400" 400 POST /v1/generate '{"prompt": [' -- 'b["code"] == 3 and b["message"]'
check "unknown JSON field: 400" 400 POST /v1/sessions '{"sesion_id": "x"}' -- 'b["code"] == 3 and "sesion_id" in b["message"]'
check "bad session id: 400" 400 POST /v1/sessions '{"session_id": "a/b"}' -- 'b["message"].startswith("session_id")'
check "duplicate session id: 409" 409 POST /v1/sessions '{"session_id": "alpha"}' -- 'b["code"] == 6'
check "truncated snapshot refused: 400" 400 POST /v1/sessions:import '{"session_id": "broken", "data": "U1REWQ=="}' -- \
  'b["code"] == 3 and b["message"]'
check "unknown path: 404 JSON" 404 GET /v2/nothing -- 'b["code"] == 5 and b["message"]'
check "wrong method: 405 JSON" 405 PUT /v1/model -- 'b["code"] == 12 and b["message"]'

# OpenAPI 2.0 document generated from the same proto.
check "GET /openapi.json: OpenAPI 2.0 with every path" 200 GET /openapi.json -- \
  'b["swagger"] == "2.0" and {"/v1/model", "/v1/sessions", "/v1/sessions/{session_id}", "/v1/sessions/{session_id}:fork", "/v1/generate", "/v1/sessions/{session_id}:export", "/v1/sessions:import"} <= set(b["paths"]) and "post" in b["paths"]["/v1/sessions/{session_id}:fork"] and "delete" in b["paths"]["/v1/sessions/{session_id}"]'

# Server gone: health turns 503, calls answer UNAVAILABLE as 503.
stop "$server_pid"
server_pid=""
check "server down: /healthz 503" 503 GET /healthz -- 'b["status"] != "SERVING"'
check "server down: GET /v1/model 503 UNAVAILABLE" 503 GET /v1/model -- 'b["code"] == 14'

finish gateway
