#!/usr/bin/env bash
# steady-gateway with TLS and API keys (docs/api.md, "TLS and API keys"; docs/security.md), in front
# of a steady-server that serves mutual TLS and requires keys: HTTPS to the gateway, mutual TLS
# behind it; the client's Authorization header reaches the server on the grpc-gateway routes, the
# OpenAI routes and a stream of each; another tenant's session answers every session route exactly as
# a missing one; 401 (with OpenAI's body on its routes), 429 with Retry-After from a tokens-per-minute
# quota, 429 for max_sessions and max_state_bytes; the server's /metrics counts the refused keys and
# the quota refusals; plain HTTP to the HTTPS port fails; flags that do not go together
# are refused; an upstream the gateway cannot verify fails calls (503) instead of going plaintext.
# Certificates are made now by openssl (tests/cli/certs.bash).
# Usage: gateway_tls.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/certs.bash"
command -v openssl > /dev/null || { echo "SKIP: needs the openssl command (scripts/install-deps.sh)"; exit 77; }
make_certs "$tmp/pki"
pki=$tmp/pki

# alice and bob: no quota; carol: 6 tokens a minute (her first call uses more, so the next waits);
# dave: one session; erin: 1 byte of state (raised below by a SIGHUP once a session's size is known).
key_hash() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
cat > "$tmp/keys.json" << EOF
{"tenants": {
  "alice": {"keys_sha256": ["$(key_hash alice-key)"]},
  "bob": {"keys_sha256": ["$(key_hash bob-key)"]},
  "erin": {"keys_sha256": ["$(key_hash erin-key)"], "max_state_bytes": 1},
  "carol": {"keys_sha256": ["$(key_hash carol-key)"], "tokens_per_minute": 6},
  "dave": {"keys_sha256": ["$(key_hash dave-key)"], "max_sessions": 1}}}
EOF

server_tls=(--tls-cert "$pki/server.pem" --tls-key "$pki/server.key")
gateway_flags=("${server_tls[@]}" --upstream-ca "$pki/ca.pem" --upstream-cert "$pki/client.pem" --upstream-key "$pki/client.key")
serve_gateway "$bin" "$src/models/tiny-softmax" --mechanism taylor --order 2 --state-memory 64M \
  "${server_tls[@]}" --tls-client-ca "$pki/ca.pem" --api-keys "$tmp/keys.json" --metrics-port 0
[[ $url == https://* ]] && grep -q "(gRPC 127.0.0.1:$port, mutual TLS)" "$tmp/gateway.log" \
  && pass "the gateway serves HTTPS, mutual TLS to the server" || fail "gateway: $url, $(cat "$tmp/gateway.log")"
metrics_url=$(sed -n 's|.*metrics on \(http://127\.0\.0\.1:[0-9]*/metrics\)$|\1|p' "$tmp/server.log")
[ -n "$metrics_url" ] || { echo "steady-server serves no metrics:"; cat "$tmp/server.log"; exit 1; }
# metric 'NAME{LABELS}': its value on the server's /metrics page (0 while the page does not list it).
metric() {
  curl -s --max-time 10 "$metrics_url" | awk -v m="$1" '$1 == m { v = $2 } END { print v == "" ? 0 : v }'
}
# moved NAME METRIC BEFORE DELTA: METRIC now reads BEFORE + DELTA.
moved() {
  local now
  now=$(metric "$2")
  [ "$now" = $(($3 + $4)) ] && pass "$1" || fail "$1: $2 is $now, was $3, expected +$4"
}

# use_key KEY: call's and check's curl trusts the test CA, sends KEY (none: no header) and keeps the
# response headers in $tmp/headers.
use_key() {
  curl_flags=(--cacert "$pki/ca.pem" -D "$tmp/headers")
  [ -n "$1" ] && curl_flags+=(-H "Authorization: Bearer $1")
  return 0
}
# header NAME: the value of a response header of the last call (HTTP/2 names are lower case).
header() { tr -d '\r' < "$tmp/headers" | sed -n "s/^$1: *//Ip" | tail -n 1; }
chat_body='{"model": "tiny-softmax", "messages": [{"role": "user", "content": "Once upon a time"}], "max_tokens": 8'

# A good key works on every kind of route.
use_key alice-key
check "a good key: GET /healthz (no key needed)" 200 GET /healthz -- 'b["status"] == "SERVING"'
check "a good key: POST /v1/sessions" 200 POST /v1/sessions '{"session_id": "chat"}' -- 'b["session_id"] == "chat"'
check "a good key: GET /v1/models (OpenAI)" 200 GET /v1/models -- 'b["data"][0]["id"] == "tiny-softmax"'
curl -s -N --max-time 60 "${curl_flags[@]}" -X POST "$url/v1/generate" \
  -d '{"session_id": "chat", "prompt": "Once upon a time", "max_tokens": 12}' > "$tmp/gen.jsonl" || true
python3 - "$tmp/gen.jsonl" << 'PY' && pass "a good key: POST /v1/generate streams over HTTPS" || fail "generate: $(head -c 500 "$tmp/gen.jsonl")"
import json, sys
msgs = [json.loads(l)["result"] for l in open(sys.argv[1])]
assert len(msgs) >= 2 and msgs[-1]["finish_reason"] == "length", msgs
assert int(msgs[-1]["usage"]["completion_tokens"]) == 12, msgs[-1]
PY
curl -s -N --max-time 60 "${curl_flags[@]}" -X POST "$url/v1/chat/completions" \
  -d "${chat_body%\}}, \"session_id\": \"chat\", \"stream\": true}" > "$tmp/chat.sse" || true
python3 - "$tmp/chat.sse" << 'PY' && pass "a good key: a /v1/chat/completions stream (server-sent events)" || fail "chat stream: $(head -c 500 "$tmp/chat.sse")"
import json, sys
events = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
assert events[-1] == "[DONE]", events
chunks = [json.loads(e) for e in events[:-1]]
assert chunks[0]["choices"][0]["delta"]["role"] == "assistant" and chunks[-1]["choices"][0]["finish_reason"] == "length", chunks
PY
check "a good key: GET /v1/sessions lists the tenant's session" 200 GET /v1/sessions -- \
  '[s["session_id"] for s in b["sessions"]] == ["chat"] and int(b["sessions"][0]["position"]) > 12'
check "a good key: GET /openapi.json" 200 GET /openapi.json -- 'b["swagger"] == "2.0"'
code=$(curl -s -o "$tmp/page" -w '%{http_code}' "${curl_flags[@]}" "$url/")
[ "$code" = 200 ] && grep -q 'id="api-key"' "$tmp/page" && pass "the playground has an API key field" \
  || fail "playground: HTTP $code"

# Another tenant's session answers every session route as a missing one does: the same status and
# the same body but for the id; the owner's session is untouched and nothing is made.
use_key alice-key
check "alice's session diary" 200 POST /v1/sessions '{"session_id": "diary"}' -- 'b["session_id"] == "diary"'
curl -s -N --max-time 60 "${curl_flags[@]}" -X POST "$url/v1/generate" \
  -d '{"session_id": "diary", "prompt": "Dear diary", "max_tokens": 4}' > /dev/null || true
check "... with a turn in it" 200 GET /v1/sessions/diary -- 'int(b["position"]) > 4'
cp "$tmp/body" "$tmp/diary.before"
use_key bob-key
# like_missing METHOD PATH [BODY]: bob's call on alice's diary (@ in PATH and BODY) answers 404 with
# the body his call on a session that exists nowhere gets, the ids aside.
like_missing() {
  local method=$1 path=$2 body=${3:-} theirs missing
  theirs=$(call "$method" "${path//@/diary}" ${body:+"${body//@/diary}"})
  cp "$tmp/body" "$tmp/theirs"
  missing=$(call "$method" "${path//@/nobody}" ${body:+"${body//@/nobody}"})
  if [ "$theirs" = 404 ] && [ "$missing" = 404 ] && [ -s "$tmp/theirs" ] \
      && [ "$(sed 's/diary/ID/g' "$tmp/theirs")" = "$(sed 's/nobody/ID/g' "$tmp/body")" ]; then
    pass "another tenant's session as a missing one: $method ${path//@/\{id\}} ($(head -c 100 "$tmp/theirs"))"
  else
    fail "$method $path: HTTP $theirs $(head -c 300 "$tmp/theirs"), missing: HTTP $missing $(head -c 300 "$tmp/body")"
  fi
}
like_missing GET /v1/sessions/@
like_missing POST /v1/generate '{"session_id": "@", "prompt": " and more", "max_tokens": 2}'
like_missing POST /v1/chat/completions "${chat_body%\}}, \"session_id\": \"@\"}"
like_missing POST /v1/sessions/@:fork '{"new_session_id": "mine"}'
like_missing GET /v1/sessions/@:export
like_missing DELETE /v1/sessions/@
check "... and bob has no session" 200 GET /v1/sessions -- 'b.get("sessions", []) == []'
use_key alice-key
check "... and alice's diary is as it was" 200 GET /v1/sessions/diary -- \
  'b == json.load(open(sys.argv[1][:-len("body")] + "diary.before"))'
check "... until alice deletes it" 200 DELETE /v1/sessions/diary -- 'b == {}'

# No key, a wrong key, a key sent any other way: 401.
missing_before=$(metric 'steady_auth_failures_total{reason="missing"}')
unknown_before=$(metric 'steady_auth_failures_total{reason="unknown"}')
use_key ""
check "no key: GET /v1/sessions is 401 (code UNAUTHENTICATED)" 401 GET /v1/sessions -- 'b["code"] == 16 and "API key" in b["message"]'
[[ $(header www-authenticate) == Bearer* ]] && pass "a 401 carries WWW-Authenticate: Bearer" || fail "no WWW-Authenticate: $(cat "$tmp/headers")"
check "no key: POST /v1/generate (a stream) is 401" 401 POST /v1/generate '{"prompt": "x", "max_tokens": 2}' -- \
  'b["error"]["grpc_code"] == 16'
check "no key: POST /v1/chat/completions is 401 with OpenAI's body" 401 POST /v1/chat/completions "$chat_body}" -- \
  'b["error"]["type"] == "invalid_request_error" and b["error"]["code"] == "invalid_api_key" and b["error"]["message"]'
curl_flags+=(-H "Grpc-Metadata-Authorization: Bearer alice-key")
check "a key in Grpc-Metadata-Authorization does not count (the Authorization header only)" 401 GET /v1/sessions -- 'b["code"] == 16'
use_key mallory-key
check "a wrong key: POST /v1/chat/completions is 401 with OpenAI's body" 401 POST /v1/chat/completions "$chat_body}" -- \
  'b["error"] == {"message": b["error"]["message"], "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}'
check "a wrong key: GET /v1/models is 401" 401 GET /v1/models -- 'b["error"]["code"] == "invalid_api_key"'
check "a wrong key: GET /v1/sessions/chat is 401" 401 GET /v1/sessions/chat -- 'b["code"] == 16'
moved "/metrics counts the 4 calls without a key" 'steady_auth_failures_total{reason="missing"}' "$missing_before" 4
moved "/metrics counts the 3 calls with an unknown key" 'steady_auth_failures_total{reason="unknown"}' "$unknown_before" 3
use_key carol-key
check "another tenant's session is 404" 404 GET /v1/sessions/chat -- 'b["code"] == 5'

# Quotas: 429; Retry-After when the server says when (tokens per minute).
check "carol's first chat completion" 200 POST /v1/chat/completions "$chat_body}" -- 'b["usage"]["total_tokens"] > 6'
check "tokens_per_minute used up: /v1/chat/completions is 429 with OpenAI's body" 429 POST /v1/chat/completions "$chat_body}" -- \
  'b["error"]["code"] == "rate_limit_exceeded" and "tokens_per_minute" in b["error"]["message"]'
retry=$(header retry-after)
[[ $retry =~ ^[0-9]+$ ]] && [ "$retry" -gt 0 ] && pass "... with Retry-After: $retry" || fail "no Retry-After: $(cat "$tmp/headers")"
check "tokens_per_minute used up: POST /v1/generate (a stream) is 429" 429 POST /v1/generate '{"prompt": "x", "max_tokens": 2}' -- \
  'b["error"]["grpc_code"] == 8 and "tokens_per_minute" in b["error"]["message"]'
retry=$(header retry-after)
[[ $retry =~ ^[0-9]+$ ]] && [ "$retry" -gt 0 ] && pass "... with Retry-After: $retry" || fail "no Retry-After: $(cat "$tmp/headers")"
use_key dave-key
check "dave's first session" 200 POST /v1/sessions '{"session_id": "one"}' -- 'b["session_id"] == "one"'
check "max_sessions reached: POST /v1/sessions is 429" 429 POST /v1/sessions '{"session_id": "two"}' -- \
  'b["code"] == 8 and "max_sessions" in b["message"]'
[ -z "$(header retry-after)" ] && pass "... without Retry-After (no time would help)" || fail "Retry-After: $(cat "$tmp/headers")"
use_key erin-key
check "max_state_bytes: a session over erin's 1 byte is 429" 429 POST /v1/sessions '{"session_id": "one"}' -- \
  'b["code"] == 8 and b["message"].startswith("quota max_state_bytes of tenant erin (1) reached")'
# Room for one session and a half, by a SIGHUP.
use_key alice-key
check "a session's state bytes" 200 GET /v1/sessions/chat -- 'int(b["state_bytes"]) > 0'
session_bytes=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["state_bytes"])' "$tmp/body")
python3 - "$tmp/keys.json" $((session_bytes * 3 / 2)) << 'PY'
import json, sys
keys = json.load(open(sys.argv[1]))
keys["tenants"]["erin"]["max_state_bytes"] = int(sys.argv[2])
json.dump(keys, open(sys.argv[1], "w"))
PY
kill -HUP "$server_pid"
[ -n "$(wait_for_line "$tmp/server.log" "$server_pid" '/SIGHUP: reloaded/p')" ] || fail "no reload: $(tail -n 3 "$tmp/server.log")"
use_key erin-key
check "... erin's first session fits" 200 POST /v1/sessions '{"session_id": "one"}' -- 'b["session_id"] == "one"'
check "... a second one is 429 naming max_state_bytes" 429 POST /v1/sessions '{"session_id": "two"}' -- \
  'b["code"] == 8 and "max_state_bytes of tenant erin" in b["message"]'
[ -z "$(header retry-after)" ] && pass "... without Retry-After" || fail "Retry-After: $(cat "$tmp/headers")"
check "... so is a fork" 429 POST /v1/sessions/one:fork '{"new_session_id": "two"}' -- 'b["code"] == 8 and "max_state_bytes" in b["message"]'
check "... and erin holds the first only" 200 GET /v1/sessions -- '[s["session_id"] for s in b["sessions"]] == ["one"]'
# Every refusal above, by tenant and quota (none was counted before).
moved "/metrics: carol's tokens_per_minute refusals" 'steady_quota_refusals_total{tenant="carol",quota="tokens_per_minute"}' 0 2
moved "/metrics: dave's max_sessions refusal" 'steady_quota_refusals_total{tenant="dave",quota="max_sessions"}' 0 1
moved "/metrics: erin's max_state_bytes refusals" 'steady_quota_refusals_total{tenant="erin",quota="max_state_bytes"}' 0 3

# Plain HTTP to the HTTPS port, and HTTPS without trusting the CA.
code=$(curl -s -o "$tmp/plain" -w '%{http_code}' --max-time 10 -H "Authorization: Bearer alice-key" "http://${url#https://}/v1/sessions" || true)
[ "$code" != 200 ] && grep -q "HTTPS" "$tmp/plain" && pass "plain HTTP to the HTTPS port fails (HTTP $code: $(head -c 60 "$tmp/plain"))" \
  || fail "plain HTTP: $code $(head -c 200 "$tmp/plain")"
rc=0
curl -s -o /dev/null --max-time 10 "$url/healthz" || rc=$?
[ "$rc" = 60 ] && pass "a client that does not trust the CA refuses the gateway's certificate" || fail "curl without --cacert: exit $rc"

# Flags that do not go together, and files that are not there.
# refused NAME WANT_RC GREP -- FLAGS...: steady-gateway with FLAGS exits WANT_RC saying GREP.
refused() {
  local name=$1 want=$2 pattern=$3 rc=0
  shift 4
  timeout 10 "$bin/steady-gateway" --http-port 0 "$@" > "$tmp/out" 2>&1 || rc=$?
  [ "$rc" = "$want" ] && grep -q -- "$pattern" "$tmp/out" && pass "$name" || fail "$name: exit $rc, $(head -c 300 "$tmp/out")"
}
refused "--tls-cert without --tls-key is refused" 2 "go together" -- --tls-cert "$pki/server.pem"
refused "--tls-key without --tls-cert is refused" 2 "go together" -- --tls-key "$pki/server.key"
refused "--upstream-cert without --upstream-key is refused" 2 "go together" -- --upstream-ca "$pki/ca.pem" --upstream-cert "$pki/client.pem"
refused "--upstream-cert without --upstream-ca is refused" 2 "needs --upstream-ca" -- \
  --upstream-cert "$pki/client.pem" --upstream-key "$pki/client.key"
refused "a missing certificate file is named" 1 "nowhere.pem" -- --tls-cert "$tmp/nowhere.pem" --tls-key "$pki/server.key"
refused "a CA file without a certificate is named" 1 "no PEM certificate" -- --upstream-ca "$pki/openssl.cnf"
refused "a non-loopback address without TLS logs a warning" 1 "WARNING: listening on 192.0.2.1 without TLS" -- \
  --http-host 192.0.2.1

# Upstreams the gateway must not use: it fails the call (503, naming the server and why) instead.
# gateway NAME FLAGS...: another steady-gateway (plain HTTP on 127.0.0.1); sets gw_url.
gateway() {
  local name=$1 pid
  shift
  "$bin/steady-gateway" --http-port 0 "$@" 2> "$tmp/$name.log" &
  pid=$!
  started_pids+=("$pid")
  gw_url=$(wait_for_line "$tmp/$name.log" "$pid" 's|.*listening on \(http://127\.0\.0\.1:[0-9]*\).*|\1|p')
  [ -n "$gw_url" ] || { echo "steady-gateway ($name) did not start:"; cat "$tmp/$name.log"; exit 1; }
}
client=(--upstream-cert "$pki/client.pem" --upstream-key "$pki/client.key")
url_tls=$url
use_key alice-key
gateway other-ca --grpc-addr "127.0.0.1:$port" --upstream-ca "$pki/other-ca.pem" "${client[@]}"
url=$gw_url
check "an upstream certificate from another CA: 503" 503 GET /v1/sessions -- \
  '"(mutual TLS) is unreachable" in b["message"] and "certificate signed by unknown authority" in b["message"]'
check "... and on the OpenAI routes: 503 server_error" 503 POST /v1/chat/completions "$chat_body}" -- \
  'b["error"]["type"] == "server_error" and "unknown authority" in b["error"]["message"]'
check "... and /healthz: 503 UNREACHABLE" 503 GET /healthz -- 'b["status"] == "UNREACHABLE"'
gateway wrong-name --grpc-addr "127.0.0.1:$port" --upstream-ca "$pki/ca.pem" --upstream-server-name wrong.example "${client[@]}"
url=$gw_url
check "--upstream-server-name the certificate does not carry: 503" 503 GET /v1/sessions -- '"wrong.example" in b["message"]'
gateway by-name --grpc-addr "127.0.0.1:$port" --upstream-ca "$pki/ca.pem" --upstream-server-name localhost "${client[@]}"
url=$gw_url
check "--upstream-server-name localhost (a name the certificate carries) works" 200 GET /v1/sessions -- \
  '[s["session_id"] for s in b["sessions"]] == ["chat"]'
gateway no-client-cert --grpc-addr "127.0.0.1:$port" --upstream-ca "$pki/ca.pem"
url=$gw_url
check "no client certificate for a mutual-TLS server: 503" 503 GET /v1/sessions -- '"(TLS) is unreachable" in b["message"]'
gateway plaintext --grpc-addr "127.0.0.1:$port"
url=$gw_url
check "a plaintext upstream to the TLS server: 503" 503 GET /v1/sessions -- '"(plaintext) is unreachable" in b["message"]'
# A plaintext server behind --upstream-ca: the gateway insists on TLS.
"$bin/steady-server" --model "$src/models/tiny-softmax" --mechanism taylor --order 2 --state-memory 64M --port 0 \
  --api-keys "$tmp/keys.json" 2> "$tmp/plain-server.log" &
started_pids+=("$!")
plain_port=$(wait_for_line "$tmp/plain-server.log" "$!" 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p')
[ -n "$plain_port" ] || { echo "steady-server (plaintext) did not start:"; cat "$tmp/plain-server.log"; exit 1; }
gateway tls-to-plain --grpc-addr "127.0.0.1:$plain_port" --upstream-ca "$pki/ca.pem"
url=$gw_url
check "--upstream-ca to a plaintext server: 503, no fallback to plaintext" 503 GET /v1/sessions -- \
  '"(TLS) is unreachable" in b["message"]'
gateway plain-to-plain --grpc-addr "127.0.0.1:$plain_port"
url=$gw_url
check "... the same server without --upstream-ca answers (the key passes through)" 200 GET /v1/sessions -- '"sessions" not in b'
url=$url_tls
finish gateway_tls
