// The official `openai` npm package against steady-gateway's OpenAI-compatible endpoints:
// models, completions and chat completions, whole and streamed, usage, seeds, session binding,
// log-probabilities and errors as the package's typed exceptions.
// Usage: node openai_client.cjs BASE_URL MODEL   (with `openai` on NODE_PATH; gateway_openai_node.sh)
"use strict";
const OpenAI = require("openai");

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: baseURL + "/v1", apiKey: "unused", maxRetries: 0, timeout: 60000 });
let passed = 0, failed = 0;

async function check(name, fn) {
  try {
    await fn();
    console.log("ok   - " + name);
    ++passed;
  } catch (e) {
    console.log("FAIL - " + name + ": " + (e && e.stack ? e.stack.split("\n").slice(0, 3).join(" | ") : e));
    ++failed;
  }
}
function assert(cond, what) { if (!cond) throw new Error("assertion failed: " + what); }
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
    assert(chunks.length > 2, chunks.length + " chunks");
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
  await refused("n > 1 is a BadRequestError naming n",
    () => client.chat.completions.create({ model, messages, n: 2 }), OpenAI.BadRequestError, 400, { param: "n" });
  await refused("an unknown session, streamed, is an error before any chunk",
    async () => collect(await client.chat.completions.create({ model, messages, stream: true, session_id: "nobody" })),
    OpenAI.NotFoundError, 404, { code: "session_not_found" });

  console.log(`openai_client: ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => { console.log("FAIL - " + e.stack); process.exit(1); });
