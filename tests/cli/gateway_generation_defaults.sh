#!/usr/bin/env bash
# generation_config.json's sampling defaults through steady-server, steady-gateway and steady-cli
# (docs/api.md, "Sampling"): a request that leaves a sampling field out gets the checkpoint's
# value, one that sets it (0 included) gets that; the final message reports the values used, and
# ModelInfo the defaults (do_sample without top_p: Hugging Face's top_p 1). The checkpoint's top_k 1
# makes its default output the greedy one. (`steady init`'s tiny model is too peaked for sampled text
# to differ from greedy: the gateway's mapping of each field is openai_sampling_test.go's.) CMake
# registers it only when the gateway is built.
# Usage: gateway_generation_defaults.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"
"$bin/steady" init --out "$tmp/model" --preset tiny --tokenizer "$src/tests/data/tokenizer/tokenizer.model" \
  --mechanism taylor --order 2 > /dev/null
cat > "$tmp/model/generation_config.json" <<'JSON'
{"do_sample": true, "temperature": 0.7, "top_k": 1, "max_new_tokens": 5, "repetition_penalty": 1.0}
JSON
serve_gateway "$bin" "$tmp/model" --state-memory 16M --max-new-tokens 64

check "GET /v1/model: generation_defaults_json lists the checkpoint's" 200 GET /v1/model -- \
  'json.loads(b["generation_defaults_json"]) == {"max_tokens": 5, "temperature": 0.7, "top_k": 1, "top_p": 1.0, "repetition_penalty": 1.0}'

# native FILE BODY: /v1/generate's streamed lines; prints the text, leaves the last result in $tmp/last.
native() {
  curl -s --max-time 60 -d "$2" "$url/v1/generate" > "$tmp/$1"
  python3 - "$tmp/$1" "$tmp/last" <<'PY'
import json, sys
results = [json.loads(l)["result"] for l in open(sys.argv[1]) if l.strip()]
json.dump(results[-1], open(sys.argv[2], "w"))
print(json.dumps("".join(r.get("text", "") for r in results)))
PY
}
greedy=$(native greedy.jsonl '{"prompt": "This License applies", "max_tokens": 5, "temperature": 0}')
defaults=$(native defaults.jsonl '{"prompt": "This License applies", "seed": 3}')
# jsonpb leaves zero values out of the JSON: .get(k, 0).
if python3 -c "
import json, sys
s = json.load(open(sys.argv[1]))['sampling']
assert int(s['max_tokens']) == 5 and abs(s['temperature'] - 0.7) < 1e-6 and s['top_k'] == 1, s
assert s['top_p'] == 1 and s['repetition_penalty'] == 1, s
assert $defaults == $greedy, ($defaults, $greedy)" "$tmp/last" 2> "$tmp/assert"; then
  pass "/v1/generate without sampling fields: the checkpoint's values, reported (top_k 1: the greedy text)"
else
  fail "/v1/generate without sampling fields: $(tail -n 1 "$tmp/assert")"
fi
zeros=$(native zeros.jsonl '{"prompt": "This License applies", "max_tokens": 3, "temperature": 0, "top_k": 0}')
if python3 -c "
import json, sys
s = json.load(open(sys.argv[1]))['sampling']
assert int(s['max_tokens']) == 3 and s.get('temperature', 0) == 0 and s.get('top_k', 0) == 0, s" "$tmp/last" 2> "$tmp/assert"
then
  pass "/v1/generate with temperature 0 and top_k 0 set: zeros, not the checkpoint's values"
else
  fail "/v1/generate with zeros: $(tail -n 1 "$tmp/assert")"
fi

# OpenAI: absent fields reach the server absent (the checkpoint's max_new_tokens and top_k 1 apply).
check "POST /v1/completions without sampling fields: the checkpoint's max_new_tokens and top_k" 200 \
  POST /v1/completions '{"model": "model", "prompt": "This License applies", "seed": 3}' -- \
  "b['choices'][0]['text'] == $greedy and b['usage']['completion_tokens'] <= 5 and (b['usage']['completion_tokens'] == 5 or b['choices'][0]['finish_reason'] == 'stop')"
check "POST /v1/completions with max_tokens 0 set: prefill only, not the checkpoint's 5" 200 \
  POST /v1/completions '{"model": "model", "prompt": "This License applies", "max_tokens": 0}' -- \
  "b['usage']['completion_tokens'] == 0"
check "POST /v1/chat/completions with max_tokens 1 set: one token" 200 POST /v1/chat/completions \
  '{"model": "model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}' -- \
  "b['usage']['completion_tokens'] == 1"

# steady-cli sends only the flags given.
if "$bin/steady-cli" --addr "127.0.0.1:$port" generate --prompt "This License applies" --max-tokens 5 --json \
     > "$tmp/cli.jsonl" 2> "$tmp/cli.err" &&
   python3 -c "
import json, sys
last = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][-1]
s = last['sampling']
assert abs(s['temperature'] - 0.7) < 1e-6 and s['top_k'] == 1 and int(s['max_tokens']) == 5, s" "$tmp/cli.jsonl" 2> "$tmp/assert"; then
  pass "steady-cli generate without sampling flags: the checkpoint's values"
else
  fail "steady-cli generate: $(tail -n 1 "$tmp/assert") $(tail -n 2 "$tmp/cli.err")"
fi

finish gateway_generation_defaults
