// The official `openai` npm package against steady-gateway's OpenAI-compatible endpoints:
// models, completions and chat completions, whole and streamed, usage, seeds, session binding,
// log-probabilities and errors as the package's typed exceptions.
// Usage: node openai_client.cjs BASE_URL MODEL   (with `openai` on NODE_PATH; gateway_openai_node.sh)
"use strict";
const OpenAI = require("openai");

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: baseURL + "/v1", apiKey: "unused", maxRetries: 0, timeout: 60000 });
const { check, assert, finish } = require("./check.cjs");
async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

async function main() {
  await check("models.list names the served model", async () => {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    assert(ids.length === 1 && ids[0] === model, JSON.stringify(ids));
  });

  const prompt = "This License applies to";
  let whole = "";
  await check("completions.create, whole", async () => {
    const r = await client.completions.create({ model, prompt, max_tokens: 10, temperature: 0 });
    whole = r.choices[0].text;
    assert(r.object === "text_completion" && whole.length > 0, JSON.stringify(r));
    assert(r.choices[0].finish_reason === "length" && r.usage.completion_tokens === 10, JSON.stringify(r.usage));
  });
  await check("completions.create, streamed: the same text", async () => {
    const chunks = await collect(await client.completions.create({ model, prompt, max_tokens: 10, temperature: 0, stream: true }));
    // The server sends the first token alone and may merge the rest while a write is in flight
    // (a loaded machine): two chunks is all that is certain; one would mean nothing streamed.
    assert(chunks.length >= 2, chunks.length + " chunks");
    assert(chunks.map((c) => c.choices[0].text).join("") === whole, "streamed text differs");
    assert(chunks[chunks.length - 1].choices[0].finish_reason === "length", "no finish_reason last");
  });

  const messages = [
    { role: "system", content: "Answer briefly." },
    { role: "user", content: "What does this License cover?" },
  ];
  let answer = "";
  await check("chat.completions.create, whole", async () => {
    const r = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0 });
    answer = r.choices[0].message.content;
    assert(r.object === "chat.completion" && r.choices[0].message.role === "assistant", JSON.stringify(r));
    assert(r.usage.prompt_tokens > 0 && r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens,
      JSON.stringify(r.usage));
  });
  await check("chat.completions.create, streamed with include_usage", async () => {
    const chunks = await collect(await client.chat.completions.create({
      model, messages, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
    }));
    const withChoices = chunks.filter((c) => c.choices.length > 0);
    assert(withChoices[0].choices[0].delta.role === "assistant", "no role first");
    assert(withChoices.map((c) => c.choices[0].delta.content || "").join("") === answer, "streamed content differs");
    const last = chunks[chunks.length - 1];
    assert(last.choices.length === 0 && last.usage && last.usage.completion_tokens > 0, JSON.stringify(last));
  });

  await check("the same seed gives the same sample, another seed another", async () => {
    const draw = async (seed) => (await client.chat.completions.create({
      model, messages, max_tokens: 16, temperature: 1, seed })).choices[0].message.content;
    const a = await draw(11), b = await draw(11), c = await draw(12);
    assert(a === b, "seed 11 twice: " + JSON.stringify([a, b]));
    assert(a !== c, "seeds 11 and 12 agree: " + JSON.stringify(a));
  });

  await check("logprobs through the package", async () => {
    const r = await client.chat.completions.create({ model, messages, max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 2 });
    const content = r.choices[0].logprobs.content;
    assert(content.length === r.usage.completion_tokens, content.length + " logprobs");
    assert(content.every((c) => c.logprob <= 0 && c.top_logprobs.length === 2), JSON.stringify(content[0]));
  });

  await check("a session bound by header: each call sends only its new message", async () => {
    const session = "node-" + process.pid;
    const created = await fetch(baseURL + "/v1/sessions", { method: "POST", body: JSON.stringify({ session_id: session }) });
    assert(created.ok, "create session: HTTP " + created.status);
    const turn = (content) => client.chat.completions.create(
      { model, messages: [{ role: "user", content }], max_tokens: 4 },
      { headers: { "X-Steady-Session": session } });
    const one = await turn("Hello");
    const two = await turn("And then?");
    const info = await (await fetch(baseURL + "/v1/sessions/" + session)).json();
    const expected = one.usage.total_tokens + two.usage.total_tokens;
    assert(Number(info.position) === expected, "position " + info.position + ", expected " + expected);
    await fetch(baseURL + "/v1/sessions/" + session, { method: "DELETE" });
  });

  await structured(messages);
  await choicesAndBias(messages, prompt);
  await fieldWalk();

  // The call must throw the package's `cls` with the given HTTP status and fields.
  const refused = (name, call, cls, status, fields) => check(name, async () => {
    let error = null;
    try {
      await call();
    } catch (e) {
      error = e;
    }
    assert(error instanceof cls && error.status === status, "got " + error);
    for (const [key, value] of Object.entries(fields)) assert(error[key] === value, key + " = " + error[key]);
  });
  await refused("an unknown model is a NotFoundError with code model_not_found",
    () => client.chat.completions.create({ model: "gpt-4o", messages }), OpenAI.NotFoundError, 404,
    { code: "model_not_found" });
  await refused("an invalid JSON Schema is a BadRequestError before any token",
    () => client.chat.completions.create({ model, messages,
      response_format: { type: "json_schema", json_schema: { name: "s", schema: { type: "widget" } } } }),
    OpenAI.BadRequestError, 400, {});
  await refused("tools are a BadRequestError naming tools",
    () => client.chat.completions.create({ model, messages,
      tools: [{ type: "function", function: { name: "f", parameters: {} } }] }), OpenAI.BadRequestError, 400, { param: "tools" });
  await refused("an unknown session, streamed, is an error before any chunk",
    async () => collect(await client.chat.completions.create({ model, messages, stream: true, session_id: "nobody" })),
    OpenAI.NotFoundError, 404, { code: "session_not_found" });

  finish("openai_client");
}

// Structured output (docs/api.md, "Structured output"): at temperature 1, from random weights, every
// answer is of its schema, whole and streamed. The schema's language is finite (enum, boolean,
// bounded integer), so every answer ends within max_tokens.
const schema = {
  type: "object",
  properties: {
    ok: { type: "boolean" },
    color: { enum: ["red", "green", "blue"] },
    size: { type: "integer", minimum: 0, maximum: 99 },
  },
  required: ["ok", "color", "size"],
  additionalProperties: false,
};
function ofSchema(text) {
  const j = JSON.parse(text);
  assert(Object.keys(j).sort().join() === "color,ok,size", text);
  assert(typeof j.ok === "boolean" && ["red", "green", "blue"].includes(j.color), text);
  assert(Number.isInteger(j.size) && j.size >= 0 && j.size <= 99, text);
}
async function structured(messages) {
  const response_format = { type: "json_schema", json_schema: { name: "answer", strict: true, schema } };
  await check("json_schema: 8 seeds at temperature 1, each answer of the schema", async () => {
    for (let seed = 1; seed <= 8; ++seed) {
      const r = await client.chat.completions.create({ model, messages, max_tokens: 200, temperature: 1, seed, response_format });
      assert(r.choices[0].finish_reason === "stop", "seed " + seed + ": " + JSON.stringify(r.choices[0]));
      ofSchema(r.choices[0].message.content);
    }
  });
  await check("json_schema streamed: 4 seeds, the chunks join into an answer of the schema", async () => {
    for (let seed = 11; seed <= 14; ++seed) {
      const chunks = await collect(await client.chat.completions.create(
        { model, messages, max_tokens: 200, temperature: 1, seed, response_format, stream: true }));
      ofSchema(chunks.map((c) => c.choices[0].delta.content || "").join(""));
      assert(chunks[chunks.length - 1].choices[0].finish_reason === "stop", "seed " + seed);
    }
  });
  await check("json_object: 6 seeds, every answer that ends is a JSON object, a cut one begins like one", async () => {
    let ended = 0;
    for (let seed = 1; seed <= 6; ++seed) {
      const r = await client.chat.completions.create(
        { model, messages, max_tokens: 120, temperature: 1, seed, response_format: { type: "json_object" } });
      const text = r.choices[0].message.content;
      if (r.choices[0].finish_reason === "stop") {
        const j = JSON.parse(text);
        assert(j !== null && typeof j === "object" && !Array.isArray(j), text);
        ++ended;
      } else {
        assert(r.choices[0].finish_reason === "length" && /^\s*\{/.test(text), text);
      }
    }
    assert(ended > 0, "no answer ended within 120 tokens");
  });
  await check("a grammar (Steady's extension) restricts the text to its language", async () => {
    const r = await client.completions.create({ model, prompt: "Answer:", max_tokens: 20, temperature: 1, seed: 5, n: 4,
      grammar: 'root ::= ("yes" | "no") "."' });
    assert(r.choices.length === 4, JSON.stringify(r));
    assert(r.choices.every((c) => ["yes.", "no."].includes(c.text) && c.finish_reason === "stop"), JSON.stringify(r.choices));
  });
}

async function choicesAndBias(messages, prompt) {
  await check("n = 3 at temperature 0: distinct indices, equal texts", async () => {
    const r = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, n: 3 });
    assert(r.choices.map((c) => c.index).join() === "0,1,2", JSON.stringify(r.choices));
    assert(new Set(r.choices.map((c) => c.message.content)).size === 1, JSON.stringify(r.choices));
  });
  await check("n = 2 streamed at temperature 1: both indices, each ended", async () => {
    const chunks = await collect(await client.chat.completions.create(
      { model, messages, max_tokens: 8, temperature: 1, seed: 2, n: 2, stream: true }));
    for (const i of [0, 1]) {
      const mine = chunks.filter((c) => c.choices.length && c.choices[0].index === i);
      assert(mine.length > 0 && mine[mine.length - 1].choices[0].finish_reason, "choice " + i);
    }
  });
  await check("logit_bias: +100 forces a token, -100 bans the greedy one", async () => {
    const forced = await client.completions.create({ model, prompt, max_tokens: 5, temperature: 1, seed: 3, logprobs: 1,
      logit_bias: { 300: 100 } });
    assert(new Set(forced.choices[0].logprobs.tokens).size === 1, JSON.stringify(forced.choices[0].logprobs.tokens));
    // The greedy token's id from steady.v1's /v1/generate (the OpenAI answer names tokens by text).
    const native = await (await fetch(baseURL + "/v1/generate", { method: "POST",
      body: JSON.stringify({ prompt, max_tokens: 1 }) })).text();
    const ids = native.split("\n").filter((l) => l.trim()).flatMap((l) => {
      const r = JSON.parse(l).result || {};
      return r.token_ids || r.tokenIds || [];
    });
    assert(ids.length === 1, native);
    const greedy = await client.completions.create({ model, prompt, max_tokens: 1, temperature: 0, logprobs: 1 });
    const banned = await client.completions.create({ model, prompt, max_tokens: 1, temperature: 0, logprobs: 1,
      logit_bias: { [ids[0]]: -100 } });
    assert(banned.choices[0].logprobs.tokens[0] !== greedy.choices[0].logprobs.tokens[0],
      "token " + ids[0] + " banned, still sampled: " + JSON.stringify(banned.choices[0].logprobs));
  });
}

// Every field of the package's request types is either implemented (tested above and in
// gateway_openai.sh) or refused with a 400 naming it: never silently ignored. The field lists are
// read from the package's own type declarations, so a newer package with a new field fails here
// until the field is decided.
const implemented = new Set(["messages", "model", "prompt", "frequency_penalty", "presence_penalty", "logit_bias",
  "logprobs", "top_logprobs", "max_tokens", "max_completion_tokens", "n", "response_format", "seed", "stop", "stream",
  "stream_options", "temperature", "top_p", "echo", "user", "parallel_tool_calls"]);
const refusedProbe = {
  audio: { voice: "alloy", format: "wav" }, function_call: { name: "f" }, functions: [{ name: "f" }],
  metadata: { k: "v" }, modalities: ["text", "audio"], prediction: { type: "content", content: "x" },
  reasoning_effort: "low", service_tier: "flex", store: true, tool_choice: "required",
  tools: [{ type: "function", function: { name: "f" } }], web_search_options: {}, best_of: 2, suffix: "end",
};
function packageFields(file, iface) {
  const fs = require("fs"), path = require("path");
  const text = fs.readFileSync(path.join(path.dirname(require.resolve("openai")), file), "utf8");
  const start = text.indexOf("export interface " + iface + " {");
  assert(start >= 0, iface + " not in " + file);
  const body = text.slice(start, text.indexOf("\n}\n", start));
  return [...body.matchAll(/^    ([a-z_]+)\??:/gm)].map((m) => m[1]);
}
async function fieldWalk() {
  for (const [file, iface, chat] of [["resources/chat/completions/completions.d.ts", "ChatCompletionCreateParamsBase", true],
                                     ["resources/completions.d.ts", "CompletionCreateParamsBase", false]]) {
    await check("every field of " + iface + " is implemented or refused naming it", async () => {
      const fields = packageFields(file, iface);
      assert(fields.length > 10, fields.join());
      for (const f of fields) {
        if (implemented.has(f)) continue;
        assert(f in refusedProbe, "a field neither implemented nor refused: " + f);
        const body = chat ? { model, messages: [{ role: "user", content: "hi" }], max_tokens: 1 } : { model, prompt: "x", max_tokens: 1 };
        body[f] = refusedProbe[f];
        const r = await fetch(baseURL + (chat ? "/v1/chat/completions" : "/v1/completions"), { method: "POST", body: JSON.stringify(body) });
        const e = await r.json();
        assert(r.status === 400 && e.error && e.error.param === f, f + ": HTTP " + r.status + " " + JSON.stringify(e));
      }
    });
  }
}

main().catch((e) => { console.log("FAIL - " + e.stack); process.exit(1); });
