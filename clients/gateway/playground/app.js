// The Steady playground: chats in a steady session through /v1/chat/completions (streamed, only the
// new message sent: the session holds the conversation), forks and deletes sessions through the
// steady.v1 routes, and shows the session's position, its state bytes and per-token latency.
// body[data-state] is "loading", "ready", "generating" or "failed": the headless browser test waits on it.
// An API key (steady-server's --api-keys), typed under Settings, is kept in this browser's
// localStorage and sent with every call as "Authorization: Bearer KEY".
"use strict";

const $ = (id) => document.getElementById(id);
const state = { model: "", current: "", transcripts: new Map(), sessions: [] };

function setState(s) { document.body.dataset.state = s; updateButtons(); }

function updateButtons() {
  const busy = document.body.dataset.state !== "ready";
  $("send").disabled = busy || !state.current;
  $("fork").disabled = busy || !state.current;
  $("delete").disabled = busy || !state.current;
  $("new").disabled = busy;
}

function showError(message) { $("error").textContent = message || ""; }

const apiKeyItem = "steady.apiKey";

// localStorage may be unavailable (storage disabled): the key then lasts as long as the page.
function loadApiKey() {
  try { return localStorage.getItem(apiKeyItem) || ""; } catch (e) { return ""; }
}

function saveApiKey(key) {
  try {
    if (key) localStorage.setItem(apiKeyItem, key);
    else localStorage.removeItem(apiKeyItem);
  } catch (e) { /* kept in the field only */ }
}

// headers plus the API key's Authorization header, when there is a key.
function withApiKey(headers) {
  const key = $("api-key").value.trim();
  if (key) headers.Authorization = "Bearer " + key;
  return headers;
}

// An HTTP error with its status (401: the key is missing or wrong).
async function httpError(response) {
  const e = new Error(await errorOf(response));
  e.status = response.status;
  return e;
}

function formatBytes(n) {
  n = Number(n);
  if (n >= 1 << 20) return (n / (1 << 20)).toFixed(2) + " MiB";
  if (n >= 1 << 10) return (n / (1 << 10)).toFixed(1) + " KiB";
  return n + " B";
}

// The message of an error body: OpenAI's {"error": {"message"}} or the gateway's {"message"}.
async function errorOf(response) {
  try {
    const body = await response.json();
    return (body.error && body.error.message) || body.message || JSON.stringify(body);
  } catch (e) {
    return "HTTP " + response.status;
  }
}

async function api(method, path, body) {
  const init = { method, headers: withApiKey({}) };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (!response.ok) throw await httpError(response);
  return response.json();
}

async function refreshSessions() {
  const list = await api("GET", "/v1/sessions");
  state.sessions = list.sessions || [];
  const ul = $("sessions");
  ul.replaceChildren();
  for (const s of state.sessions) {
    const li = document.createElement("li");
    li.dataset.session = s.session_id;
    li.className = s.session_id === state.current ? "current" : "";
    const name = document.createElement("b");
    name.textContent = s.session_id;
    name.title = s.session_id;
    const pos = document.createElement("span");
    pos.textContent = Number(s.position || 0) + " tok";
    li.append(name, pos);
    li.onclick = () => select(s.session_id);
    ul.append(li);
  }
  const current = state.sessions.find((s) => s.session_id === state.current);
  $("position").textContent = current ? Number(current.position || 0) + " tokens" : "–";
  $("state-bytes").textContent = current ? formatBytes(current.state_bytes || 0) : "–";
}

function renderTranscript() {
  const box = $("transcript");
  box.replaceChildren();
  for (const m of state.transcripts.get(state.current) || []) box.append(messageElement(m));
  box.scrollTop = box.scrollHeight;
}

function messageElement(m) {
  const div = document.createElement("div");
  div.className = "msg " + m.role;
  div.textContent = m.role === "assistant" ? m.text.trimStart() : m.text;
  if (m.meta) {
    const meta = document.createElement("span");
    meta.className = "meta";
    meta.textContent = m.meta;
    div.append(meta);
  }
  return div;
}

async function select(id) {
  state.current = id;
  if (!state.transcripts.has(id)) state.transcripts.set(id, []);
  renderTranscript();
  await refreshSessions();
  updateButtons();
}

async function newSession() {
  const s = await api("POST", "/v1/sessions", {});
  state.transcripts.set(s.session_id, []);
  await select(s.session_id);
}

async function forkSession() {
  const s = await api("POST", "/v1/sessions/" + encodeURIComponent(state.current) + ":fork", {});
  state.transcripts.set(s.session_id, [...(state.transcripts.get(state.current) || [])]);
  await select(s.session_id);
}

async function deleteSession() {
  await api("DELETE", "/v1/sessions/" + encodeURIComponent(state.current));
  state.transcripts.delete(state.current);
  state.current = "";
  await refreshSessions();
  if (state.sessions.length) await select(state.sessions[0].session_id);
  else await newSession();
}

function drawLatency(latencies) {
  const canvas = $("latency");
  const g = canvas.getContext("2d");
  g.clearRect(0, 0, canvas.width, canvas.height);
  if (!latencies.length) return;
  const max = Math.max(...latencies);
  const w = canvas.width / latencies.length;
  g.fillStyle = "#2f5fd0";
  latencies.forEach((ms, i) => {
    const h = (ms / max) * (canvas.height - 16);
    g.fillRect(i * w, canvas.height - h, Math.max(1, w - 1), h);
  });
  g.fillStyle = "#5b6578";
  g.font = "11px system-ui";
  g.fillText("max " + max.toFixed(1) + " ms", 4, 12);
}

// Reads a server-sent-event stream, calling onData with each parsed "data:" payload until [DONE].
async function readEvents(response, onData) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return;
        onData(JSON.parse(data));
      }
    }
  }
}

async function send(text) {
  const transcript = state.transcripts.get(state.current);
  const session = state.sessions.find((s) => s.session_id === state.current);
  const messages = [];
  const system = $("system").value.trim();
  if (system && (!session || Number(session.position || 0) === 0)) messages.push({ role: "system", content: system });
  messages.push({ role: "user", content: text });
  transcript.push({ role: "user", text });
  const reply = { role: "assistant", text: "" };
  transcript.push(reply);
  renderTranscript();
  const bubble = $("transcript").lastElementChild;
  bubble.classList.add("streaming");

  const start = performance.now();
  let last = start, firstAt = 0, tokens = 0;
  const latencies = [];
  const response = await fetch("/v1/chat/completions", {
    method: "POST",
    headers: withApiKey({ "Content-Type": "application/json" }),
    body: JSON.stringify({
      model: state.model, session_id: state.current, messages, stream: true,
      stream_options: { include_usage: true }, logprobs: true,
      temperature: Number($("temperature").value), max_tokens: Number($("max-tokens").value),
    }),
  });
  if (!response.ok) throw await httpError(response);
  await readEvents(response, (chunk) => {
    if (chunk.error) throw new Error(chunk.error.message);
    const now = performance.now();
    for (const choice of chunk.choices || []) {
      const n = choice.logprobs && choice.logprobs.content ? choice.logprobs.content.length : 0;
      if (n > 0) {
        if (!firstAt) firstAt = now;
        else for (let i = 0; i < n; ++i) latencies.push((now - last) / n);
        tokens += n;
        last = now;
      }
      if (choice.delta && choice.delta.content) {
        reply.text += choice.delta.content;
        bubble.textContent = reply.text.trimStart();
      }
    }
    $("tokens").textContent = String(tokens);
    if (firstAt) $("ttft").textContent = (firstAt - start).toFixed(0) + " ms";
    if (latencies.length) {
      const mean = latencies.reduce((a, b) => a + b, 0) / latencies.length;
      $("per-token").textContent = mean.toFixed(1) + " ms";
    }
    drawLatency(latencies);
  });
  bubble.classList.remove("streaming");
  const mean = latencies.length ? latencies.reduce((a, b) => a + b, 0) / latencies.length : 0;
  reply.meta = tokens + " tokens · first " + (firstAt ? (firstAt - start).toFixed(0) : "–") + " ms · " +
    mean.toFixed(1) + " ms/token";
  renderTranscript();
  await refreshSessions();
}

async function guarded(action, busy = "busy") {
  showError("");
  setState(busy);
  try {
    await action();
  } catch (e) {
    showError(e.message);
  }
  setState("ready");
}

async function start() {
  setState("loading");
  showError("");
  state.current = "";
  state.transcripts = new Map(); // another key may be another tenant, with other sessions
  try {
    const models = await api("GET", "/v1/models");
    state.model = models.data[0].id;
    const info = await api("GET", "/v1/model");
    $("model").textContent = state.model + " · " + info.mechanism + " · " +
      formatBytes(info.state_bytes_per_session) + " state per session";
    await refreshSessions();
    if (state.sessions.length) await select(state.sessions[0].session_id);
    else await newSession();
    setState("ready");
  } catch (e) {
    showError(e.status === 401 || e.status === 403 ? "set the API key under Settings: " + e.message
                                                    : "cannot reach the server: " + e.message);
    setState("failed");
  }
}

$("composer").onsubmit = (event) => {
  event.preventDefault();
  const text = $("input").value.trim();
  if (!text || document.body.dataset.state !== "ready") return;
  $("input").value = "";
  guarded(() => send(text), "generating");
};
$("input").onkeydown = (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
};
$("new").onclick = () => guarded(newSession);
$("fork").onclick = () => guarded(forkSession);
$("delete").onclick = () => guarded(deleteSession);
$("api-key").value = loadApiKey();
$("api-key").onchange = () => {
  saveApiKey($("api-key").value.trim());
  // The sessions are the new key's; a call under way finishes first, and the next uses the new key.
  if (["ready", "failed"].includes(document.body.dataset.state)) start();
};
start();
