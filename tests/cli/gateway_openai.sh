#!/usr/bin/env bash
# The OpenAI-compatible endpoints of steady-gateway (docs/api.md, "OpenAI-compatible endpoints") in
# front of a real steady-server, with curl: /v1/models, /v1/completions and /v1/chat/completions
# answered whole and as server-sent events (framing, [DONE], include_usage), the same greedy text
# as steady.v1, speculation's extension field, session binding, the prefix cache's cached_tokens,
# logprobs, token-id prompts, echo, and OpenAI-shaped errors. CMake registers it only when the gateway is built.
# Usage: gateway_openai.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"
"$bin/steady" init --out "$tmp/model" --preset tiny --tokenizer "$src/tests/data/tokenizer/tokenizer.model" \
  --mechanism taylor --order 2 > /dev/null
serve_gateway "$bin" "$tmp/model" --state-memory 16M --max-prompt-tokens 200 --max-new-tokens 64 \
  --prefix-cache-interval 16

# sse PATH BODY: the streamed answer's headers to $tmp/headers, its body to $tmp/events.
sse() { curl -s -N -D "$tmp/headers" -o "$tmp/events" --max-time 60 -H 'Content-Type: application/json' \
  --data-binary "$2" "$url$1" || echo "curl-failed"; }
# check_sse NAME PYTHON: the Python code (over `events`: the parsed data payloads, `raw`: the body,
# `headers`) must not raise.
check_sse() {
  if python3 - "$tmp/events" "$tmp/headers" "$tmp" > "$tmp/assert" 2>&1 <<PY
import json, sys
raw = open(sys.argv[1]).read()
headers = open(sys.argv[2]).read().lower()
assert "content-type: text/event-stream" in headers, headers
blocks = raw.split("\n\n")
assert blocks[-1] == "", "the body does not end with a blank line: %r" % raw[-80:]
assert blocks[-2] == "data: [DONE]", "the last event is not [DONE]: %r" % blocks[-2:]
for b in blocks[:-1]:
    assert b.startswith("data: ") and "\n" not in b, "not one data: line: %r" % b
events = [json.loads(b[6:]) for b in blocks[:-2]]
assert len({e["id"] for e in events}) == 1, "chunks with different ids"
$2
PY
  then pass "$1"; else fail "$1: $(tail -n 3 "$tmp/assert") (body: $(head -c 400 "$tmp/events"))"; fi
}

check "a default max_tokens stays within the server's --max-new-tokens" 200 POST /v1/chat/completions \
  '{"model": "model", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}' -- \
  'b["usage"]["completion_tokens"] <= 64'
check "GET /v1/models lists the served model" 200 GET /v1/models -- \
  'b["object"] == "list" and [m["id"] for m in b["data"]] == ["model"] and b["data"][0]["object"] == "model"'

# Greedy: the same text as steady.v1's /v1/generate.
curl -s --max-time 60 -d '{"prompt": "This License applies", "max_tokens": 12}' "$url/v1/generate" > "$tmp/native.jsonl"
native=$(python3 -c "import json, sys; print(json.dumps(''.join(json.loads(l)['result'].get('text', '') for l in open(sys.argv[1]) if l.strip())))" "$tmp/native.jsonl")
check "POST /v1/completions: whole, greedy text as /v1/generate's" 200 POST /v1/completions \
  '{"model": "model", "prompt": "This License applies", "max_tokens": 12, "temperature": 0}' -- \
  "b['object'] == 'text_completion' and b['choices'][0]['text'] == $native and b['choices'][0]['finish_reason'] == 'length' and b['usage']['completion_tokens'] == 12 and b['usage']['total_tokens'] == b['usage']['prompt_tokens'] + 12 and b['id'].startswith('cmpl-')"

sse /v1/completions '{"model": "model", "prompt": "This License applies", "max_tokens": 12, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}'
check_sse "POST /v1/completions stream: data: events, [DONE], the same text, usage last" "
assert all(e['object'] == 'text_completion' for e in events)
text_chunks = [e for e in events if e['choices']]
assert ''.join(e['choices'][0]['text'] for e in text_chunks) == $native
assert [e['choices'][0]['finish_reason'] for e in text_chunks][-1] == 'length'
assert all(e['choices'][0]['finish_reason'] is None for e in text_chunks[:-1])
assert events[-1]['choices'] == [] and events[-1]['usage']['completion_tokens'] == 12, events[-1]
# The server writes the first token as soon as it has it and merges what comes while a write is
# in flight (server/rpc/service_generate.cc), so a loaded machine may send the other 11 in one
# message: two chunks is all that is certain, and one would mean the gateway held the stream back.
assert len(text_chunks) >= 2, 'not streamed: %d chunks' % len(text_chunks)"

# Speculation (Steady's extension): prompt-lookup drafts verified per step, the same greedy text, the
# drafted and accepted tokens in usage; a mode the server does not know is a 400.
check "speculation ngram: the same greedy text, drafts reported in usage" 200 POST /v1/completions \
  '{"model": "model", "prompt": "This License applies", "max_tokens": 12, "temperature": 0, "speculation": {"mode": "ngram", "draft_tokens": 3}}' -- \
  "b['choices'][0]['text'] == $native and b['usage']['completion_tokens'] == 12 and b['usage']['speculation']['drafted_tokens'] > 0 and 0 <= b['usage']['speculation']['accepted_tokens'] <= b['usage']['speculation']['drafted_tokens'] and b['usage']['completion_tokens_details']['rejected_prediction_tokens'] == b['usage']['speculation']['drafted_tokens'] - b['usage']['speculation']['accepted_tokens']"
check "speculation with an unknown mode: 400" 400 POST /v1/completions \
  '{"model": "model", "prompt": "x", "max_tokens": 2, "speculation": {"mode": "medusa"}}' -- \
  '"speculation" in b["error"]["message"] and b["error"]["type"] == "invalid_request_error"'
check "speculation that is not an object: 400 naming it" 400 POST /v1/completions \
  '{"model": "model", "prompt": "x", "max_tokens": 2, "speculation": "ngram"}' -- 'b["error"]["param"] == "speculation"'

chat='"messages": [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What does this License cover?"}]'
check "POST /v1/chat/completions: whole" 200 POST /v1/chat/completions \
  "{\"model\": \"model\", $chat, \"max_tokens\": 10, \"temperature\": 0}" -- \
  'b["object"] == "chat.completion" and b["choices"][0]["message"]["role"] == "assistant" and b["choices"][0]["finish_reason"] in ("stop", "length") and b["id"].startswith("chatcmpl-")'
chat_text=$(python3 -c "import json, sys; print(json.dumps(json.load(open(sys.argv[1]))['choices'][0]['message']['content']))" "$tmp/body")
sse /v1/chat/completions "{\"model\": \"model\", $chat, \"max_tokens\": 10, \"temperature\": 0, \"stream\": true}"
check_sse "POST /v1/chat/completions stream: role first, the same content, no usage unasked" "
assert all(e['object'] == 'chat.completion.chunk' for e in events)
assert events[0]['choices'][0]['delta']['role'] == 'assistant'
assert ''.join(e['choices'][0]['delta'].get('content', '') for e in events) == $chat_text
assert events[-1]['choices'][0]['finish_reason'] in ('stop', 'length') and 'usage' not in events[-1]"

# Session binding: each call appends to the session, with only the new messages.
check "POST /v1/sessions chat" 200 POST /v1/sessions '{"session_id": "chat"}' -- 'b["session_id"] == "chat"'
check "chat bound by session_id appends to the session" 200 POST /v1/chat/completions \
  '{"model": "model", "session_id": "chat", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 5}' -- \
  'b["session_id"] == "chat" and b["usage"]["prompt_tokens"] > 0'
first=$(python3 -c "import json, sys; u = json.load(open(sys.argv[1]))['usage']; print(u['prompt_tokens'] + u['completion_tokens'])" "$tmp/body")
check "the session's position is the turn's tokens" 200 GET /v1/sessions/chat -- "int(b['position']) == $first"
got=$(curl -s -o "$tmp/body" -w '%{http_code}' --max-time 60 -H 'X-Steady-Session: chat' \
  -d '{"model": "model", "messages": [{"role": "user", "content": "And then?"}], "max_tokens": 5}' "$url/v1/chat/completions")
second=$(python3 -c "import json, sys; u = json.load(open(sys.argv[1]))['usage']; print(u['prompt_tokens'] + u['completion_tokens'])" "$tmp/body" 2> /dev/null || echo 0)
[ "$got" = 200 ] && [ "$second" -gt 0 ] && pass "an X-Steady-Session header binds too" || fail "X-Steady-Session: HTTP $got $(head -c 300 "$tmp/body")"
check "the second turn appended" 200 GET /v1/sessions/chat -- "int(b['position']) == $first + $second"
check "stateless calls leave no session behind" 200 GET /v1/sessions -- '[s["session_id"] for s in b["sessions"]] == ["chat"]'

# The prefix cache: a stateless client resending a shared system prompt starts from its state.
system=$(python3 -c "print(' '.join(['You are a careful assistant who reads every license twice.'] * 4))")
ask() { echo "{\"model\": \"model\", \"messages\": [{\"role\": \"system\", \"content\": \"$system\"}, {\"role\": \"user\", \"content\": \"$1\"}], \"max_tokens\": 3}"; }
check "a new system prompt: nothing cached" 200 POST /v1/chat/completions "$(ask 'First question?')" -- \
  'b["usage"]["prompt_tokens_details"]["cached_tokens"] == 0 and b["usage"]["prompt_tokens"] > 64'
check "the same system prompt again: its prefix comes from the cache" 200 POST /v1/chat/completions "$(ask 'Second one?')" -- \
  'b["usage"]["prompt_tokens_details"]["cached_tokens"] >= 48 and b["usage"]["prompt_tokens_details"]["cached_tokens"] < b["usage"]["prompt_tokens"]'

# Log-probabilities, token-id prompts, echo.
# The tokens spell the text, except where a token is part of a UTF-8 character (byte tokens from the
# sampled, random-weight model): alone it shows as U+FFFD while the text holds the whole character.
check "completions logprobs: one per token, at most N alternatives" 200 POST /v1/completions \
  '{"model": "model", "prompt": "This License", "max_tokens": 6, "logprobs": 2}' -- \
  'len(b["choices"][0]["logprobs"]["tokens"]) == 6 and all(l <= 0 for l in b["choices"][0]["logprobs"]["token_logprobs"]) and all(1 <= len(t) <= 2 for t in b["choices"][0]["logprobs"]["top_logprobs"]) and ("".join(b["choices"][0]["logprobs"]["tokens"]) == b["choices"][0]["text"] or any("\ufffd" in t for t in b["choices"][0]["logprobs"]["tokens"]))'
check "chat logprobs with top_logprobs" 200 POST /v1/chat/completions \
  "{\"model\": \"model\", $chat, \"max_tokens\": 4, \"temperature\": 0, \"logprobs\": true, \"top_logprobs\": 3}" -- \
  'len(b["choices"][0]["logprobs"]["content"]) == b["usage"]["completion_tokens"] and all(len(c["top_logprobs"]) == 3 and c["top_logprobs"][0]["token"] == c["token"] for c in b["choices"][0]["logprobs"]["content"])'
check "a token-id prompt" 200 POST /v1/completions '{"model": "model", "prompt": [5, 6, 7, 8], "max_tokens": 3}' -- \
  'b["usage"]["prompt_tokens"] == 5 and b["usage"]["completion_tokens"] == 3'
check "echo puts the prompt in front" 200 POST /v1/completions \
  '{"model": "model", "prompt": "This License", "max_tokens": 3, "echo": true}' -- \
  'b["choices"][0]["text"].startswith("This License") and len(b["choices"][0]["text"]) > len("This License")'

# n choices: one prefill, the state forked; at temperature 0 the choices agree.
check "n = 3, greedy: three choices, indices 0..2, the same text" 200 POST /v1/completions \
  '{"model": "model", "prompt": "This License applies", "max_tokens": 12, "temperature": 0, "n": 3}' -- \
  "[c['index'] for c in b['choices']] == [0, 1, 2] and all(c['text'] == $native and c['finish_reason'] == 'length' for c in b['choices']) and b['usage']['completion_tokens'] == 36"
sse /v1/chat/completions "{\"model\": \"model\", $chat, \"max_tokens\": 10, \"temperature\": 1, \"seed\": 3, \"n\": 2, \"stream\": true}"
check_sse "n = 2 streamed: chunks of both choices, each with its role first and its finish_reason" "
idx = sorted({e['choices'][0]['index'] for e in events})
assert idx == [0, 1], idx
for i in idx:
    mine = [e['choices'][0] for e in events if e['choices'][0]['index'] == i]
    assert mine[0]['delta'].get('role') == 'assistant', mine[0]
    assert mine[-1]['finish_reason'] in ('stop', 'length') and all(m['finish_reason'] is None for m in mine[:-1])"

# Structured output: the answer is of the schema / grammar even at temperature 1 from random weights.
schema='{"type": "object", "properties": {"ok": {"type": "boolean"}, "color": {"enum": ["red", "green"]}}, "required": ["ok", "color"], "additionalProperties": false}'
for seed in 1 2 3; do
  check "json_schema, seed $seed: the answer parses and is of the schema" 200 POST /v1/chat/completions \
    "{\"model\": \"model\", $chat, \"max_tokens\": 64, \"temperature\": 1, \"seed\": $seed, \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"s\", \"strict\": true, \"schema\": $schema}}}" -- \
    "b['choices'][0]['finish_reason'] == 'stop' and (lambda j: sorted(j) == ['color', 'ok'] and isinstance(j['ok'], bool) and j['color'] in ('red', 'green'))(json.loads(b['choices'][0]['message']['content']))"
done
check "a grammar: the text is of its language" 200 POST /v1/completions \
  '{"model": "model", "prompt": "Answer:", "max_tokens": 20, "temperature": 1, "seed": 4, "n": 4, "grammar": "root ::= (\"yes\" | \"no\") \".\""}' -- \
  "all(c['text'] in ('yes.', 'no.') and c['finish_reason'] == 'stop' for c in b['choices'])"

# logit_bias: +100 forces a token at every step, -100 bans the greedy one.
check "logit_bias +100 forces token 300 at every step, at temperature 1" 200 POST /v1/completions \
  '{"model": "model", "prompt": "This License applies", "max_tokens": 6, "temperature": 1, "seed": 9, "logprobs": 1, "logit_bias": {"300": 100}}' -- \
  "len(b['choices'][0]['logprobs']['tokens']) == 6 and len(set(b['choices'][0]['logprobs']['tokens'])) == 1"
greedy_id=$(python3 -c "
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)['result'] if l.strip() else {}
    ids = r.get('token_ids', r.get('tokenIds', []))
    if ids:
        print(ids[0]); break" "$tmp/native.jsonl")
check "greedy, its first token" 200 POST /v1/completions \
  '{"model": "model", "prompt": "This License applies", "max_tokens": 1, "temperature": 0, "logprobs": 1}' -- \
  "b['choices'][0]['text'] == b['choices'][0]['logprobs']['tokens'][0]"
greedy_token=$(python3 -c "import json, sys; print(json.dumps(json.load(open(sys.argv[1]))['choices'][0]['logprobs']['tokens'][0]))" "$tmp/body")
check "logit_bias -100 bans the greedy token $greedy_id" 200 POST /v1/completions \
  "{\"model\": \"model\", \"prompt\": \"This License applies\", \"max_tokens\": 1, \"temperature\": 0, \"logprobs\": 1, \"logit_bias\": {\"$greedy_id\": -100}}" -- \
  "b['choices'][0]['logprobs']['tokens'][0] != $greedy_token and $native.startswith($greedy_token)"
check "presence and frequency penalties are taken" 200 POST /v1/completions \
  '{"model": "model", "prompt": "This License applies", "max_tokens": 8, "presence_penalty": 1.5, "frequency_penalty": 0.5}' -- \
  "b['usage']['completion_tokens'] == 8"

# Errors: OpenAI's shape, {"error": {"message", "type", "param", "code"}}.
err='isinstance(b["error"]["message"], str) and b["error"]["message"] and "type" in b["error"] and "param" in b["error"] and "code" in b["error"]'
check "unknown model: 404 model_not_found" 404 POST /v1/chat/completions \
  '{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}' -- \
  "$err and b['error']['code'] == 'model_not_found' and 'gpt-4o' in b['error']['message']"
check "n = 0: 400 naming n" 400 POST /v1/chat/completions \
  '{"model": "model", "messages": [{"role": "user", "content": "hi"}], "n": 0}' -- \
  "$err and b['error']['param'] == 'n' and b['error']['type'] == 'invalid_request_error'"
check "n > 1 with a session: 400 naming n" 400 POST /v1/chat/completions \
  '{"model": "model", "session_id": "chat", "messages": [{"role": "user", "content": "hi"}], "n": 2}' -- \
  "$err and 'n' in b['error']['message']"
check "an unknown field: 400 naming it" 400 POST /v1/chat/completions \
  '{"model": "model", "messages": [{"role": "user", "content": "hi"}], "temprature": 0.5}' -- \
  "$err and b['error']['param'] == 'temprature'"
check "tools: 400 naming tools" 400 POST /v1/chat/completions \
  '{"model": "model", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}]}' -- \
  "$err and b['error']['param'] == 'tools' and 'tool calling' in b['error']['message']"
check "an invalid JSON Schema: 400 naming the problem" 400 POST /v1/chat/completions \
  '{"model": "model", "messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "widget"}}}}' -- \
  "$err and 'widget' in b['error']['message']"
check "an invalid grammar: 400" 400 POST /v1/completions \
  '{"model": "model", "prompt": "x", "grammar": "root ::= missing"}' -- "$err and 'missing' in b['error']['message']"
python3 -c "import sys; sys.stdout.write('{\"model\": \"model\", \"prompt\": \"' + 'a' * (17 << 20) + '\"}')" > "$tmp/big.json"
got=$(curl -s -o "$tmp/body" -w '%{http_code}' --max-time 60 --data-binary @"$tmp/big.json" "$url/v1/completions")
[ "$got" = 413 ] && grep -q request_too_large "$tmp/body" && pass "a 17 MiB body: 413 request_too_large, not 429" ||
  fail "a 17 MiB body: HTTP $got $(head -c 300 "$tmp/body")"
# 9 MB: past gRPC's default 4 MiB message limit (once a 429), within the 32 MiB one: the server's
# own prompt limit answers.
python3 -c "import sys; sys.stdout.write('{\"model\": \"model\", \"prompt\": \"' + 'license ' * (9 << 17) + '\"}')" > "$tmp/big.json"
got=$(curl -s -o "$tmp/body" -w '%{http_code}' --max-time 120 --data-binary @"$tmp/big.json" "$url/v1/completions")
[ "$got" = 400 ] && grep -q max_prompt_tokens "$tmp/body" && pass "a 9 MB prompt: 400 naming max_prompt_tokens, not a gRPC size 429" ||
  fail "a 9 MB prompt: HTTP $got $(head -c 300 "$tmp/body")"
rm -f "$tmp/big.json"
check "bad JSON: 400" 400 POST /v1/completions '{"model": "model", "prompt": ' -- "$err and 'JSON' in b['error']['message']"
long=$(python3 -c "print(' '.join(['license'] * 400))")
check "a prompt over the limit: 400 naming the limit" 400 POST /v1/completions \
  "{\"model\": \"model\", \"prompt\": \"$long\"}" -- "$err and 'max_prompt_tokens' in b['error']['message']"
check "an unknown session: 404 session_not_found" 404 POST /v1/chat/completions \
  '{"model": "model", "session_id": "nobody", "messages": [{"role": "user", "content": "hi"}]}' -- \
  "$err and b['error']['code'] == 'session_not_found' and 'nobody' in b['error']['message']"
check "an unknown session, streamed: the error before any event" 404 POST /v1/chat/completions \
  '{"model": "model", "session_id": "nobody", "stream": true, "messages": [{"role": "user", "content": "hi"}]}' -- \
  "$err and b['error']['code'] == 'session_not_found'"
check "max_tokens over the limit: 400" 400 POST /v1/completions '{"model": "model", "prompt": "x", "max_tokens": 1000}' -- \
  "$err and 'max_tokens' in b['error']['message']"
check "no model: 400 naming model" 400 POST /v1/completions '{"prompt": "x"}' -- "$err and b['error']['param'] == 'model'"
check "empty messages: 400" 400 POST /v1/chat/completions '{"model": "model", "messages": []}' -- \
  "$err and b['error']['param'] == 'messages'"
check "an unknown role: 400" 400 POST /v1/chat/completions '{"model": "model", "messages": [{"role": "tool", "content": "x"}]}' -- \
  "$err and 'role' in b['error']['message']"
check "top_logprobs without logprobs: 400" 400 POST /v1/chat/completions \
  '{"model": "model", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}' -- "$err and b['error']['param'] == 'top_logprobs'"
check "NaN-like temperature: 400" 400 POST /v1/completions '{"model": "model", "prompt": "x", "temperature": 1e9}' -- \
  "$err and 'temperature' in b['error']['message']"
check "GET /v1/completions: 405" 405 GET /v1/completions -- "$err"
check "the refused calls changed no session" 200 GET /v1/sessions/chat -- "int(b['position']) == $first + $second"

finish gateway_openai
