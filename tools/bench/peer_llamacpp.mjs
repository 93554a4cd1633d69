// Steady side by side with llama.cpp (prebuilt CPU build from npm, driven through node-llama-cpp).
// Run through tools/bench/peer_llamacpp.sh, which installs the packages and converts the checkpoints;
// docs/peer-llamacpp.md has the method and the figures.
//
//   node peer_llamacpp.mjs check   --steady BIN --model DIR --gguf FILE [--data TEXT] ...
//       greedy tokens of both engines on the same prompts (ids from llama.cpp, text from
//       `steady generate`, compared as text), llama.cpp's tokenizer against sentencepiece's, and the
//       per-token NLL of both on the same ids (`steady eval` against llama.cpp's logits).
//   node peer_llamacpp.mjs exact   --steady BIN --model DIR --gguf FILE --prompts "1,5,9;1,300,7" [--max-tokens 64]
//       exactness on token ids: per prompt, llama.cpp's logits after the prompt against
//       `steady generate --prompt-ids --json --logits`'s (max absolute difference, and relative to the
//       logits' spread), and the greedy continuations of --max-tokens ids (llama.cpp: the argmax of
//       its logits at each step; EOS does not end either engine's) compared id for id. One JSON object.
//   node peer_llamacpp.mjs llama   --gguf FILE --depths 0,1024 --steps N --prefill-tokens N ...
//       llama.cpp alone: one JSON line per depth, as `steady bench --json` would give.
//   node peer_llamacpp.mjs tokenize --steady BIN --gguf FILE --texts TEXTS.json
//       a GGUF file's own tokenizer: llama.cpp's ids against `steady tokenize --model FILE` per text.
//   node peer_llamacpp.mjs compare --steady BIN --model DIR --gguf FILE --rounds R ...
//       interleaved runs (steady bench and llama.cpp, R times, alternating which goes first; each a
//       fresh process on the same weights) and the median of each engine's per-run figures. --model may
//       be the GGUF file itself; --label names the weights in the table (default: --cpu-weights).
//   node peer_llamacpp.mjs serve   --gguf FILE --sequences N --turns T --prompt-tokens P --output-tokens G
//                                  [--batch-wait-ms W]
//       llama.cpp serving a multi-turn load: N sequences of one context side by side (node-llama-cpp
//       batches their steps into one llama_decode), each T turns of P new prompt tokens and G greedy
//       tokens; one JSON object shaped like steady-loadtest's --json (summary, per-turn latency).
//   node peer_llamacpp.mjs table COMPARE.json ...
//       the markdown rows of docs/peer-llamacpp.md.
//
// A decode step at depth D needs D tokens in the KV cache. Steady's bench writes D random rows; a real
// prefill of 32K tokens of a 1B model takes minutes on a small CPU, so llama.cpp gets the same kind of
// setup: 32 real tokens (--seed-cells) are evaluated, the sequence state is saved
// (llama_state_seq_save_file), the rows are repeated up to D cells at positions 0..D-1, and the file is
// loaded back. A step reads every cell whatever it holds, so the time is that of a real context.
import {execFileSync, spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {fileURLToPath} from "node:url";

const SELF = fileURLToPath(import.meta.url);

// --- flags ---------------------------------------------------------------------------------------
function parseFlags(argv) {
  const flags = {_: []};
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    if (!a.startsWith("--")) { flags._.push(a); continue; }
    const eq = a.indexOf("=");
    if (eq > 0) flags[a.slice(2, eq)] = a.slice(eq + 1);
    else if (i + 1 < argv.length && !argv[i + 1].startsWith("--")) flags[a.slice(2)] = argv[++i];
    else flags[a.slice(2)] = "true";
  }
  return flags;
}
const ints = (s) => String(s).split(",").filter((x) => x !== "").map((x) => parseInt(x, 10));
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
function die(msg) {
  console.error(`peer_llamacpp: ${msg}`);
  process.exit(1);
}

// --- llama.cpp through node-llama-cpp --------------------------------------------------------------
async function loadLlama(flags) {
  const modules = flags["node-modules"] || process.env.PEER_NODE_MODULES;
  if (!modules) die("--node-modules DIR (the npm cache's node_modules) is required");
  const nlc = await import(path.join(modules, "node-llama-cpp", "dist", "index.js"));
  const threads = parseInt(flags.threads || String(os.availableParallelism()), 10);
  const llama = await nlc.getLlama({gpu: false, build: "never", maxThreads: threads,
                                    logLevel: nlc.LlamaLogLevel.error, progressLogs: false});
  return {nlc, llama, threads, release: `${llama.llamaCppRelease.repo} ${llama.llamaCppRelease.release}`};
}

async function createContext(model, flags, threads, contextSize, batchSize) {
  const kv = (flags.kv || "f32").toUpperCase();
  // "auto" resolves to on for the CPU backend (its log: "Flash Attention enabled"); "on" is the default here
  // so that the report says what ran.
  const fa = flags.flash === "off" ? false : flags.flash === "auto" ? "auto" : true;
  return model.createContext({
    contextSize, batchSize, sequences: 1, threads: {ideal: threads, min: threads}, flashAttention: fa,
    experimentalKvCacheKeyType: kv, experimentalKvCacheValueType: kv, ignoreMemorySafetyChecks: true,
  });
}

// Deterministic token stream (xorshift32) over [3, vocab): no BOS/EOS/unknown.
function tokenStream(vocab, seed) {
  let s = seed >>> 0 || 1;
  return (n) => Array.from({length: n}, () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return 3 + (s % (vocab - 3));
  });
}

// A llama_state_seq file (version 3, one stream) holding `seedCells` cells, read and rewritten with
// `cells` cells: positions 0..cells-1, the seed's K and V rows repeated.
//   "ggsq" u32 version | u32 n_tokens, i32 tokens[n] | u32 n_stream (1) | u32 cell_count |
//   cell_count x (i32 pos, u32 n_seq_id (1), i32 seq_id) | u32 v_trans | u32 n_layer |
//   n_layer x (i32 k_type, u64 k_row_bytes, cell_count rows) |
//   v_trans == 0: n_layer x (i32 v_type, u64 v_row_bytes, cell_count rows)
//   v_trans == 1: n_layer x (i32 v_type, u32 v_elem_bytes, u32 n_embd_v, n_embd_v x cell_count elements)
function growStateFile(seedPath, outPath, cells) {
  const b = fs.readFileSync(seedPath);
  let o = 0;
  const u32 = () => { const v = b.readUInt32LE(o); o += 4; return v; };
  const u64 = () => { const v = Number(b.readBigUInt64LE(o)); o += 8; return v; };
  if (b.toString("latin1", 0, 4) !== "qsgg") throw new Error(`${seedPath}: not a llama sequence state file`);
  o = 4;
  const version = u32();
  if (version !== 3) throw new Error(`${seedPath}: state version ${version}, this reader knows 3`);
  const nTokens = u32();
  const tokens = b.subarray(o, o + 4 * nTokens); o += 4 * nTokens;
  if (u32() !== 1) throw new Error(`${seedPath}: more than one stream`);
  const seedCells = u32();
  if (seedCells !== nTokens) throw new Error(`${seedPath}: ${seedCells} cells for ${nTokens} tokens`);
  o += 12 * seedCells;
  const vTrans = u32(), nLayer = u32();

  const fd = fs.openSync(outPath, "w");
  const out = (buf) => fs.writeSync(fd, buf);
  const head = Buffer.alloc(12); head.write("qsgg", 0, "latin1"); head.writeUInt32LE(3, 4); head.writeUInt32LE(cells, 8);
  out(head);
  const tok = Buffer.alloc(4 * cells);
  for (let i = 0; i < cells; ++i) tok.writeInt32LE(tokens.readInt32LE(4 * (i % nTokens)), 4 * i);
  out(tok);
  const meta = Buffer.alloc(8 + 12 * cells);
  meta.writeUInt32LE(1, 0); meta.writeUInt32LE(cells, 4);
  for (let i = 0; i < cells; ++i) { meta.writeInt32LE(i, 8 + 12 * i); meta.writeUInt32LE(1, 12 + 12 * i); meta.writeInt32LE(0, 16 + 12 * i); }
  out(meta);
  const lv = Buffer.alloc(8); lv.writeUInt32LE(vTrans, 0); lv.writeUInt32LE(nLayer, 4); out(lv);
  // `count` runs of `seedCells` elements of `elem` bytes each, every run repeated out to `cells`.
  const repeatRuns = (count, elem) => {
    for (let r = 0; r < count; ++r) {
      const run = b.subarray(o, o + seedCells * elem); o += seedCells * elem;
      const grown = Buffer.alloc(cells * elem);
      for (let at = 0; at < grown.length; at += run.length) run.copy(grown, at, 0, Math.min(run.length, grown.length - at));
      out(grown);
    }
  };
  for (let l = 0; l < nLayer; ++l) {  // K
    out(b.subarray(o, o + 12)); o += 4; const row = u64(); repeatRuns(1, row);
  }
  for (let l = 0; l < nLayer; ++l) {  // V
    if (!vTrans) { out(b.subarray(o, o + 12)); o += 4; const row = u64(); repeatRuns(1, row); continue; }
    out(b.subarray(o, o + 12)); o += 4; const elem = u32(), nEmbd = u32(); repeatRuns(nEmbd, elem);
  }
  fs.closeSync(fd);
  if (o !== b.length) throw new Error(`${seedPath}: ${b.length - o} bytes left after the last layer`);
}

// llama.cpp's figures for one GGUF: prefill, then decode at each depth. One JSON line per depth.
async function cmdLlama(flags) {
  const {llama, threads, release} = await loadLlama(flags);
  const model = await llama.loadModel({modelPath: flags.gguf, gpuLayers: 0});
  const vocab = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
  const tokens = tokenStream(vocab, parseInt(flags.seed || "1", 10));
  const steps = parseInt(flags.steps || "16", 10), warmup = 3;
  const prefillTokens = parseInt(flags["prefill-tokens"] || "0", 10);
  const chunk = parseInt(flags["prefill-chunk"] || "512", 10);
  const seedCells = parseInt(flags["seed-cells"] || "32", 10);
  const tmp = fs.mkdtempSync(path.join(flags["state-dir"] || os.tmpdir(), "peer-llamacpp-"));
  try {
    let prefill = null;
    if (prefillTokens > 0) {  // as steady bench: one untimed chunk, reset, then N tokens in chunks
      const ctx = await createContext(model, flags, threads, prefillTokens + 8, Math.min(chunk, prefillTokens));
      const seq = ctx.getSequence();
      await seq.evaluateWithoutGeneratingNewTokens(tokens(Math.min(chunk, prefillTokens)));
      await seq.clearHistory();
      const t0 = performance.now();
      await seq.evaluateWithoutGeneratingNewTokens(tokens(prefillTokens));
      const seconds = (performance.now() - t0) / 1000;
      prefill = {tokens: prefillTokens, chunk, seconds, tokens_per_second: prefillTokens / seconds};
      await ctx.dispose();
    }
    let first = true;
    for (const depth of ints(flags.depths || "0")) {
      const ctx = await createContext(model, flags, threads, depth + warmup + steps + 8, 512);
      const seq = ctx.getSequence();
      let setupSeconds = 0;
      if (depth > 0) {
        const s0 = performance.now();
        const real = Math.min(depth, seedCells);
        await seq.evaluateWithoutGeneratingNewTokens(tokens(real));
        if (depth > real) {
          const seed = path.join(tmp, "seed.bin"), grown = path.join(tmp, "grown.bin");
          await seq.saveStateToFile(seed);
          growStateFile(seed, grown, depth);
          await seq.clearHistory();
          await seq.loadStateFromFile(grown, {acceptRisk: true});
          fs.rmSync(grown); fs.rmSync(seed);
        }
        setupSeconds = (performance.now() - s0) / 1000;
        if (seq.nextTokenIndex !== depth) throw new Error(`depth ${depth}: sequence holds ${seq.nextTokenIndex} tokens`);
      }
      // One token per step, each ending in a greedy draw (as steady bench's steps).
      const times = [];
      const it = seq.evaluate(tokens(1), {temperature: 0})[Symbol.asyncIterator]();
      for (let i = 0; i < warmup + steps; ++i) {
        const t0 = performance.now();
        const r = await it.next();
        if (r.done) throw new Error(`generation ended after ${i} steps`);
        if (i >= warmup) times.push((performance.now() - t0) / 1000);
      }
      await it.return();
      const step = median(times);
      console.log(JSON.stringify({
        engine: "llama.cpp", release, system_info: llama.systemInfo, gguf: flags.gguf, threads,
        kv_type: (flags.kv || "f32").toLowerCase(),
        flash_attention: ctx.flashAttention, context_size: ctx.contextSize,
        decode: {batch: 1, context: depth, steps, warmup_steps: warmup, step_seconds_median: step,
                 step_seconds_min: Math.min(...times), tokens_per_second: 1 / step,
                 setup: depth > seedCells ? `state of ${seedCells} real tokens repeated to the depth` : "real tokens",
                 setup_seconds: setupSeconds},
        prefill: first ? prefill : null,
      }));
      first = false;
      await ctx.dispose();
    }
  } finally {
    fs.rmSync(tmp, {recursive: true, force: true});
    await model.dispose();
    await llama.dispose();
  }
}

// --- serving: N sequences, multi-turn -------------------------------------------------------------
const percentile = (xs, q) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor(q * s.length))] : null;
};
const latencyStats = (xs) => ({mean: xs.reduce((a, b) => a + b, 0) / xs.length, p50: median(xs), p90: percentile(xs, 0.9)});

async function cmdServe(flags) {
  const {llama, threads, release} = await loadLlama(flags);
  const model = await llama.loadModel({modelPath: flags.gguf, gpuLayers: 0});
  const vocab = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
  const sequences = parseInt(flags.sequences || "16", 10), turns = parseInt(flags.turns || "30", 10);
  const promptTokens = parseInt(flags["prompt-tokens"] || "32", 10);
  const outputTokens = parseInt(flags["output-tokens"] || "16", 10);
  const seed = parseInt(flags.seed || "1", 10);
  const kv = (flags.kv || "f32").toUpperCase();
  // node-llama-cpp dispatches a batch on the next event-loop turn after the first sequence queues a
  // token; sequences whose generators resume later miss it. --batch-wait-ms W waits W ms instead, so
  // that one llama_decode gathers every sequence's token.
  const waitMs = parseFloat(flags["batch-wait-ms"] || "0");
  const batching = waitMs > 0 ? {dispatchSchedule: (dispatch) => setTimeout(dispatch, waitMs)} : {};
  const ctx = await model.createContext({
    contextSize: turns * (promptTokens + outputTokens) + 16, sequences, batchSize: 512, batching,
    threads: {ideal: threads, min: threads}, flashAttention: flags.flash === "on",
    experimentalKvCacheKeyType: kv, experimentalKvCacheValueType: kv, ignoreMemorySafetyChecks: true,
  });
  const records = [];
  const t0 = performance.now();
  try {
    await Promise.all(Array.from({length: sequences}, async (_, s) => {
      const seq = ctx.getSequence();
      const tokens = tokenStream(vocab, seed * 1000 + s);
      for (let turn = 1; turn <= turns; ++turn) {
        const start = performance.now();
        let first = null, n = 0;
        // Greedy tokens until G of them (EOS is not a stop here, as max_tokens with random weights).
        for await (const _token of seq.evaluate(tokens(promptTokens), {temperature: 0})) {
          if (first === null) first = performance.now();
          if (++n >= outputTokens) break;
        }
        const end = performance.now();
        records.push({session: s, turn, start_s: (start - t0) / 1000, prompt_tokens: promptTokens, output_tokens: n,
                      ttft_ms: first - start, e2e_ms: end - start, session_position: seq.nextTokenIndex});
      }
    }));
  } finally {
    const duration = (performance.now() - t0) / 1000;
    const out = records.reduce((a, r) => a + r.output_tokens, 0);
    const byTurn = [];
    for (let t = 1; t <= turns; ++t) {
      const rs = records.filter((r) => r.turn === t);
      if (rs.length) byTurn.push({turn: t, ttft_ms: latencyStats(rs.map((r) => r.ttft_ms)), e2e_ms: latencyStats(rs.map((r) => r.e2e_ms))});
    }
    console.log(JSON.stringify({
      engine: "llama.cpp", release, system_info: llama.systemInfo, gguf: flags.gguf, threads, kv_type: kv.toLowerCase(),
      flash_attention: ctx.flashAttention, context_size_per_sequence: ctx.contextSize,
      config: {sessions: sequences, turns, prompt_tokens: promptTokens, output_tokens: outputTokens, batch_wait_ms: waitMs},
      summary: {requests: sequences * turns, completed: records.length, duration_s: duration, output_tokens: out,
                output_tokens_per_s: out / duration, ttft_ms: latencyStats(records.map((r) => r.ttft_ms)),
                e2e_ms: latencyStats(records.map((r) => r.e2e_ms))},
      turns: byTurn,
    }));
    await ctx.dispose();
    await model.dispose();
    await llama.dispose();
  }
}

// --- cross-check ------------------------------------------------------------------------------------
const DEFAULT_PROMPTS = [
  "Once upon a time",
  "The history of the city",
  "In 1998, the company",
  "She opened the door and",
  "The main reason for the war was",
  "Water boils at",
];

function sentencepieceIds(tokenizerModel, texts) {
  const py = `
import json, sys, sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
print(json.dumps([sp.encode(t) for t in json.load(sys.stdin)]))`;
  const out = execFileSync(process.env.PEER_PYTHON || "/usr/bin/python3", ["-c", py, tokenizerModel],
                           {input: JSON.stringify(texts), maxBuffer: 1 << 28});
  return JSON.parse(out);
}

function steadyGenerate(flags, prompt, maxTokens) {
  const r = spawnSync(flags.steady, ["generate", "--model", flags.model, "--prompt", prompt, "--max-tokens",
                                     String(maxTokens), "--temperature", "0", "--device", "cpu",
                                     ...(flags["cpu-weights"] ? ["--cpu-weights", flags["cpu-weights"]] : [])],
                      {encoding: "utf8", maxBuffer: 1 << 26});
  if (r.status !== 0) throw new Error(`steady generate: ${r.stderr}`);
  return r.stdout.endsWith("\n") ? r.stdout.slice(0, -1) : r.stdout;  // it ends the stream with a newline
}

async function cmdCheck(flags) {
  const {llama, threads} = await loadLlama(flags);
  const model = await llama.loadModel({modelPath: flags.gguf, gpuLayers: 0});
  const maxTokens = parseInt(flags["max-tokens"] || "128", 10);
  const prompts = flags.prompts ? JSON.parse(fs.readFileSync(flags.prompts, "utf8")) : DEFAULT_PROMPTS;
  const tokenizerModel = path.join(flags.model, "tokenizer.model");
  const report = {gguf: flags.gguf, model: flags.model, max_tokens: maxTokens, prompts: []};
  const bos = model.tokens.bos, eos = model.tokens.eos;

  // 1. Tokenizer: llama.cpp's SPM tokenizer against sentencepiece (what Steady links) on the prompts
  //    and on the evaluation text.
  let evalText = null;
  if (flags.data) evalText = fs.readFileSync(flags.data, "utf8").slice(0, parseInt(flags["data-chars"] || "6000", 10));
  const texts = evalText ? [...prompts, evalText] : prompts;
  const spIds = sentencepieceIds(tokenizerModel, texts);
  report.tokenizer = texts.map((t, i) => {
    const ours = model.tokenize(t);
    const same = ours.length === spIds[i].length && ours.every((x, j) => x === spIds[i][j]);
    return {chars: t.length, tokens: spIds[i].length, identical: same};
  });

  // 2. Greedy generation, prompt ids from sentencepiece with BOS first (as steady generate does).
  const ctx = await createContext(model, flags, threads, 1024, 512);
  const seq = ctx.getSequence();
  for (let p = 0; p < prompts.length; ++p) {
    await seq.clearHistory();
    const promptIds = [bos, ...spIds[p]];
    const ids = [];
    for await (const t of seq.evaluate(promptIds, {temperature: 0})) {
      if (t === eos) break;
      ids.push(t);
      if (ids.length >= maxTokens) break;
    }
    const theirs = steadyGenerate(flags, prompts[p], maxTokens);
    // The longest run of llama.cpp's tokens whose text is a prefix of Steady's text.
    let agree = 0;
    for (let n = 1; n <= ids.length; ++n) {
      if (theirs.startsWith(model.detokenize(ids.slice(0, n), false, promptIds))) agree = n; else break;
    }
    const ours = model.detokenize(ids, false, promptIds);
    report.prompts.push({prompt: prompts[p], generated: ids.length, identical_text: ours === theirs,
                         agreeing_tokens: agree, llama_cpp: ours, steady: theirs});
  }
  await ctx.dispose();

  // 3. NLL per token on the same ids: steady eval (decode path, BOS first) against llama.cpp's logits.
  if (evalText) {
    const n = Math.min(parseInt(flags["eval-tokens"] || "512", 10), spIds[spIds.length - 1].length);
    const ids = spIds[spIds.length - 1].slice(0, n);
    const tmpText = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "peer-eval-")), "eval.txt");
    fs.writeFileSync(tmpText, evalText);
    const r = spawnSync(flags.steady, ["eval", "--model", flags.model, "--data", tmpText, "--max-tokens", String(n),
                                       "--json", "--device", "cpu",
                                       ...(flags["cpu-weights"] ? ["--cpu-weights", flags["cpu-weights"]] : [])],
                        {encoding: "utf8"});
    fs.rmSync(path.dirname(tmpText), {recursive: true});
    if (r.status !== 0) throw new Error(`steady eval: ${r.stderr}`);
    const steady = JSON.parse(r.stdout);
    const ectx = await createContext(model, flags, threads, n + 256, 512);
    const eseq = ectx.getSequence();
    const input = [bos, ...ids.slice(0, n - 1)].map((t, i) => i === 0 ? t : [t, {generateNext: {
      logits: {filter: {tokens: [ids[i]], includeTop: 1}}, totalLogitWeight: true}}]);  // includeMax is not honoured with a filter (3.22.1): top 1 is the max
    const out = await eseq.controlledEvaluate(input);
    let nll = 0;
    for (let i = 1; i < input.length; ++i) {
      const next = out[i].next;
      const maxLogit = Math.max(...next.logits.values());
      nll += Math.log(next.totalLogitWeight) + maxLogit - next.logits.get(ids[i]);
    }
    report.nll = {tokens_scored: n - 1, steady: steady.nll_per_token, llama_cpp: nll / (n - 1),
                  abs_diff: Math.abs(steady.nll_per_token - nll / (n - 1))};
    await ectx.dispose();
  }
  await model.dispose();
  await llama.dispose();
  console.log(JSON.stringify(report, null, 1));
}

// --- exactness on token ids ------------------------------------------------------------------------
function argmax(logits) {  // Map<token, logit> -> the lowest id of the largest logit (Steady's tie rule)
  let best = -1, bestLogit = -Infinity;
  for (const [t, l] of logits) if (l > bestLogit || (l === bestLogit && t < best)) { best = t; bestLogit = l; }
  return best;
}

async function cmdExact(flags) {
  const {llama, threads, release} = await loadLlama(flags);
  const model = await llama.loadModel({modelPath: flags.gguf, gpuLayers: 0});
  const maxTokens = parseInt(flags["max-tokens"] || "64", 10);
  const prompts = String(flags.prompts).split(";").map(ints);
  const vocab = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
  const report = {engine: "llama.cpp", release, gguf: flags.gguf, model: flags.model, max_tokens: maxTokens,
                  prompts: []};
  const ctx = await createContext(model, {...flags, flash: flags.flash || "off"}, threads, 1024, 512);
  const seq = ctx.getSequence();
  for (const prompt of prompts) {
    await seq.clearHistory();
    // llama.cpp: the prompt, then one token at a time, the argmax of its raw logits each step.
    const step = async (ids) => {
      const input = ids.map((t, i) => i === ids.length - 1 ? [t, {generateNext: {logits: true}}] : t);
      const out = await seq.controlledEvaluate(input);
      return out[out.length - 1].next.logits;
    };
    let logits = await step(prompt);
    const first = Array.from({length: vocab}, (_, t) => logits.get(t));
    const theirs = [];
    while (theirs.length < maxTokens) {
      const t = argmax(logits);
      theirs.push(t);
      if (theirs.length < maxTokens) logits = await step([t]);
    }
    // Steady: the same ids, greedy, its logits after the prompt.
    const r = spawnSync(flags.steady, ["generate", "--model", flags.model, "--prompt-ids", prompt.join(","),
                                       "--max-tokens", String(maxTokens), "--json", "--logits", "--ignore-eos", "--device", "cpu",
                                       "--temperature", "0", "--top-k", "0", "--top-p", "1", "--repetition-penalty", "1",
                                       ...(flags["cpu-weights"] ? ["--cpu-weights", flags["cpu-weights"]] : [])],
                        {encoding: "utf8", maxBuffer: 1 << 26});
    if (r.status !== 0) throw new Error(`steady generate: ${r.stderr}`);
    const steady = JSON.parse(r.stdout.trim().split("\n").pop());
    let maxDiff = 0, mean = 0, sq = 0;
    for (let t = 0; t < vocab; ++t) {
      maxDiff = Math.max(maxDiff, Math.abs(steady.logits[t] - first[t]));
      mean += first[t] / vocab;
    }
    for (let t = 0; t < vocab; ++t) sq += (first[t] - mean) ** 2 / vocab;
    let agree = 0;
    while (agree < Math.min(theirs.length, steady.ids.length) && theirs[agree] === steady.ids[agree]) ++agree;
    report.prompts.push({prompt, generated_llama_cpp: theirs.length, generated_steady: steady.ids.length,
                         agreeing_tokens: agree, identical: agree === theirs.length && agree === steady.ids.length,
                         max_abs_logit_diff: maxDiff, logit_std: Math.sqrt(sq),
                         max_logit_diff_over_std: maxDiff / Math.sqrt(sq), llama_cpp: theirs, steady: steady.ids});
  }
  await ctx.dispose();
  await model.dispose();
  await llama.dispose();
  console.log(JSON.stringify(report));
}

// --- tokenization of a GGUF file's own vocabulary ----------------------------------------------------
// llama.cpp's tokenizer (the vocabulary only, special tokens parsed in the text) against
// `steady tokenize --model FILE.gguf --batch` on each text of --texts (a JSON list); also whether both
// put BOS in front of a prompt.
async function cmdTokenize(flags) {
  const {llama} = await loadLlama(flags);
  const model = await llama.loadModel({modelPath: flags.gguf, gpuLayers: 0, vocabOnly: true});
  const texts = JSON.parse(fs.readFileSync(flags.texts, "utf8"));
  const r = spawnSync(flags.steady, ["tokenize", "--model", flags.gguf, "--batch"],
                      {input: texts.map((t) => JSON.stringify(t)).join("\n") + "\n", encoding: "utf8", maxBuffer: 1 << 28});
  if (r.status !== 0) throw new Error(`steady tokenize: ${r.stderr}`);
  const ours = r.stdout.trim().split("\n").map((l) => JSON.parse(l));
  const report = {gguf: flags.gguf, texts: texts.length, identical: 0, differing: []};
  texts.forEach((t, i) => {
    const theirs = Array.from(model.tokenize(t, true));
    const mine = ours[i].ids || [];
    if (theirs.length === mine.length && theirs.every((x, j) => x === mine[j])) ++report.identical;
    else report.differing.push({text: t, llama_cpp: theirs, steady: ours[i].ids || ours[i]});
  });
  const pre = spawnSync(flags.steady, ["tokenize", "--model", flags.gguf, "--add-special"], {input: "a", encoding: "utf8"});
  const withSpecial = JSON.parse(pre.stdout).ids, plain = model.tokenize("a", true);
  report.bos = {llama_cpp_prepends: model.tokens.shouldPrependBosToken, steady_prepends: withSpecial.length > plain.length && withSpecial[0] === model.tokens.bos};
  await model.dispose();
  await llama.dispose();
  console.log(JSON.stringify(report));
}

// --- interleaved comparison -------------------------------------------------------------------------
function runJsonLines(cmd, args, env) {
  const r = spawnSync(cmd, args, {encoding: "utf8", maxBuffer: 1 << 26, env: {...process.env, ...env}});
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")}: exit ${r.status}\n${r.stderr}`);
  return r.stdout.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l));
}

function cmdCompare(flags) {
  const rounds = parseInt(flags.rounds || "3", 10);
  const depths = flags.depths || "0,1024";
  const steps = flags.steps || "16", prefill = flags["prefill-tokens"] || "256", chunk = flags["prefill-chunk"] || "256";
  const threads = flags.threads || String(os.availableParallelism());
  const steadyArgs = ["bench", "--model", flags.model, "--batch", "1", "--context", depths, "--steps", steps,
                      "--prefill-tokens", prefill, "--prefill-chunk", chunk, "--json", "--device", "cpu",
                      "--mechanism", "softmax", "--threads", threads, "--copy-bytes", "67108864",
                      ...(flags["cpu-weights"] ? ["--cpu-weights", flags["cpu-weights"]] : [])];
  const llamaArgs = [SELF, "llama", "--gguf", flags.gguf, "--depths", depths, "--steps", steps,
                     "--prefill-tokens", prefill, "--prefill-chunk", chunk, "--threads", flags["llama-threads"] || threads,
                     "--kv", flags.kv || "f32", "--flash", flags.flash || "on",
                     "--node-modules", flags["node-modules"] || process.env.PEER_NODE_MODULES,
                     ...(flags["state-dir"] ? ["--state-dir", flags["state-dir"]] : [])];
  const runs = {steady: [], llama: []};
  for (let r = 0; r < rounds; ++r) {
    // Alternate which engine goes first, so neither always runs on a warmer (or hotter) machine.
    const order = r % 2 === 0 ? ["steady", "llama"] : ["llama", "steady"];
    for (const engine of order) {
      const t0 = performance.now();
      const lines = engine === "steady" ? runJsonLines(flags.steady, steadyArgs) : runJsonLines(process.execPath, llamaArgs);
      runs[engine].push(lines);
      console.error(`round ${r + 1}/${rounds} ${engine}: ${((performance.now() - t0) / 1000).toFixed(1)} s: ` +
                    lines.map((l) => `${l.decode.context}:${l.decode.tokens_per_second.toFixed(2)}`).join(" ") +
                    (lines[0].prefill ? ` prefill ${lines[0].prefill.tokens_per_second.toFixed(1)}` : ""));
    }
  }
  const table = ints(depths).map((depth, i) => ({
    depth,
    steady_tokens_per_second: median(runs.steady.map((l) => l[i].decode.tokens_per_second)),
    llama_cpp_tokens_per_second: median(runs.llama.map((l) => l[i].decode.tokens_per_second)),
    steady_runs: runs.steady.map((l) => l[i].decode.tokens_per_second),
    llama_cpp_runs: runs.llama.map((l) => l[i].decode.tokens_per_second),
  }));
  const pre = (rs) => rs.map((l) => l[0].prefill?.tokens_per_second).filter((x) => x !== undefined);
  const summary = {
    model: flags.model, gguf: flags.gguf, cpu_weights: flags.label || flags["cpu-weights"] || "auto",
    kv_llama_cpp: flags.kv || "f32",
    flash_attention_llama_cpp: runs.llama[0][0].flash_attention, llama_cpp_release: runs.llama[0][0].release,
    llama_cpp_system_info: runs.llama[0][0].system_info, threads: Number(threads),
    llama_cpp_threads: runs.llama[0][0].threads, rounds, steps: Number(steps),
    date: new Date().toISOString(), cpu: os.cpus()[0].model, cores: os.cpus().length,
    decode: table,
    prefill: {tokens: Number(prefill), chunk: Number(chunk), steady_tokens_per_second: median(pre(runs.steady)),
              llama_cpp_tokens_per_second: median(pre(runs.llama)), steady_runs: pre(runs.steady),
              llama_cpp_runs: pre(runs.llama)},
    steady_raw: runs.steady, llama_cpp_raw: runs.llama,
  };
  console.log(JSON.stringify(summary));
}

// Markdown rows from `compare` outputs (one JSON object per file).
function cmdTable(flags) {
  const fmt = (x) => x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2);
  const rows = ["| weights | KV (llama.cpp) | depth | Steady tokens/s | llama.cpp tokens/s | Steady / llama.cpp | runs (Steady; llama.cpp) |",
                "|---|---|---|---|---|---|---|"];
  for (const file of flags._.slice(1)) {
    const s = JSON.parse(fs.readFileSync(file, "utf8"));
    const runs = (a, b) => `${a.map(fmt).join(", ")}; ${b.map(fmt).join(", ")}`;
    for (const d of s.decode) {
      rows.push(`| ${s.cpu_weights} | ${s.kv_llama_cpp} | ${d.depth} | ${fmt(d.steady_tokens_per_second)} | ` +
                `${fmt(d.llama_cpp_tokens_per_second)} | ${(d.steady_tokens_per_second / d.llama_cpp_tokens_per_second).toFixed(2)} | ` +
                `${runs(d.steady_runs, d.llama_cpp_runs)} |`);
    }
    const p = s.prefill;
    if (p.steady_runs.length) {
      rows.push(`| ${s.cpu_weights} | ${s.kv_llama_cpp} | prefill ${p.tokens} (chunks of ${p.chunk}) | ${fmt(p.steady_tokens_per_second)} | ` +
                `${fmt(p.llama_cpp_tokens_per_second)} | ${(p.steady_tokens_per_second / p.llama_cpp_tokens_per_second).toFixed(2)} | ` +
                `${runs(p.steady_runs, p.llama_cpp_runs)} |`);
    }
  }
  console.log(rows.join("\n"));
}

// --- main -------------------------------------------------------------------------------------------
const flags = parseFlags(process.argv.slice(2));
const command = flags._[0];
if (command === "llama") await cmdLlama(flags);
else if (command === "check") await cmdCheck(flags);
else if (command === "exact") await cmdExact(flags);
else if (command === "tokenize") await cmdTokenize(flags);
else if (command === "compare") cmdCompare(flags);
else if (command === "table") cmdTable(flags);
else if (command === "serve") await cmdServe(flags);
else die("usage: peer_llamacpp.mjs check|exact|tokenize|llama|compare|serve|table [flags] (see the comment at the top of this file)");
