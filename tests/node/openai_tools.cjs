// OpenAI tool calling through the official `openai` npm package against steady-gateway and a
// steady-server whose checkpoint carries a real chat template (tests/cli/hf_chat_server.sh: Qwen3's
// hermes <tool_call> tags, Llama 3.1's JSON): a named tool_choice comes back as tool_calls (whole and
// streamed, the same call), with the prompt the reference renders; the call and a role "tool" result
// sent back render into the next prompt.
// Usage: node openai_tools.cjs BASE_URL MODEL PROMPT_TOKENS   (with `openai` on NODE_PATH)
"use strict";
const OpenAI = require("openai");

const [baseURL, model, promptTokens] = process.argv.slice(2);
const client = new OpenAI({ baseURL: baseURL + "/v1", apiKey: "unused", maxRetries: 0, timeout: 120000 });
const { check, assert, finish } = require("./check.cjs");

const tools = [{ type: "function", function: { name: "get_weather", description: "The weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
const messages = [{ role: "user", content: "Weather in Paris?" }];
// A random model fills the arguments' strings until max_tokens: a bias on '"' (id 1) and '}' (92), among
// the tokens the grammar allows, lets it close them at once. The same ids in both vocabularies.
const request = { model, messages, tools, temperature: 0, max_tokens: 150, logit_bias: { 1: 60, 92: 40 },
  tool_choice: { type: "function", function: { name: "get_weather" } } };

async function main() {
  let call = null, used = 0;
  await check(`${model}: a named tool_choice comes back as tool_calls, prompt of ${promptTokens} tokens`, async () => {
    const r = await client.chat.completions.create(request);
    const choice = r.choices[0];
    assert(choice.finish_reason === "tool_calls", "finish_reason " + choice.finish_reason);
    const calls = choice.message.tool_calls || [];
    assert(calls.length === 1 && calls[0].type === "function" && calls[0].function.name === "get_weather", JSON.stringify(calls));
    assert(typeof calls[0].id === "string" && calls[0].id.length > 0, "id " + calls[0].id);
    const args = JSON.parse(calls[0].function.arguments);
    assert(args && typeof args === "object" && !Array.isArray(args), "arguments " + calls[0].function.arguments);
    assert(r.usage.prompt_tokens === Number(promptTokens), `prompt_tokens ${r.usage.prompt_tokens}`);
    call = calls[0];
    used = r.usage.prompt_tokens;
  });

  await check(`${model}: streamed, the deltas add up to the same call`, async () => {
    const stream = await client.chat.completions.create({ ...request, stream: true });
    const byIndex = new Map();
    let finish = null;
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      if (!c) continue;
      for (const d of c.delta.tool_calls || []) {
        const t = byIndex.get(d.index) || { name: "", arguments: "" };
        t.name += d.function?.name || "";
        t.arguments += d.function?.arguments || "";
        byIndex.set(d.index, t);
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
    assert(finish === "tool_calls", "finish_reason " + finish);
    assert(byIndex.size === 1 && byIndex.get(0).name === "get_weather", JSON.stringify([...byIndex]));
    assert(call && byIndex.get(0).arguments === call.function.arguments,
           `${byIndex.get(0).arguments} != ${call && call.function.arguments}`);
  });

  await check(`${model}: the call and a role "tool" result go back into the next prompt`, async () => {
    assert(call, "no call from the first request");
    const r = await client.chat.completions.create({ model, tools, temperature: 0, max_tokens: 2, messages: [
      ...messages,
      { role: "assistant", content: null, tool_calls: [call] },
      { role: "tool", tool_call_id: call.id, content: '{"temperature": 21}' },
    ] });
    assert(r.choices.length === 1 && r.usage.prompt_tokens > used, `prompt_tokens ${r.usage.prompt_tokens} after ${used}`);
  });

  finish("openai_tools");
}
main().catch((e) => { console.log("FAIL - " + e); process.exit(1); });
