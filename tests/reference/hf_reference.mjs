// Hugging Face's own JS implementations as the reference the tokenizer and template tests compare
// Steady with: @huggingface/tokenizers (encode, decode) and @huggingface/jinja (chat templates, as
// transformers.js renders them). Copied beside the npm cache's node_modules by tests/reference/
// npm_cache.bash (ES modules resolve packages from the script's own folder).
//
//   node hf_reference.mjs encode DIR        stdin: {"text": s, "add_special_tokens": b} per line
//                                           stdout: {"ids": [...]} or {"error": "..."} per line
//   node hf_reference.mjs decode DIR        stdin: [ids] per line -> {"text": s} | {"error": ...}
//   node hf_reference.mjs random-ids DIR N  N seeded random id lists (any id of the vocabulary)
//   node hf_reference.mjs render            stdin: {"template": s, "context": {...}} per line
//                                           -> {"text": s} | {"error": "..."}
//   node hf_reference.mjs bench DIR FILE [ROUNDS]  encode throughput on FILE's text: {"mb_per_s": x, ...}
// DIR holds tokenizer.json (and tokenizer_config.json).
import fs from "fs";
import { Tokenizer } from "@huggingface/tokenizers";
import { Template } from "@huggingface/jinja";

const [mode, dir, arg1, arg2] = process.argv.slice(2);

function loadTokenizer(d) {
  const json = JSON.parse(fs.readFileSync(`${d}/tokenizer.json`, "utf8"));
  let config = {};
  if (fs.existsSync(`${d}/tokenizer_config.json`)) config = JSON.parse(fs.readFileSync(`${d}/tokenizer_config.json`, "utf8"));
  return new Tokenizer(json, config);
}

function lines() {
  return fs.readFileSync(0, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
}

function answer(fn) {
  try {
    return JSON.stringify(fn());
  } catch (e) {
    return JSON.stringify({ error: String(e.message ?? e) });
  }
}

const out = [];
if (mode === "encode") {
  const t = loadTokenizer(dir);
  for (const q of lines()) out.push(answer(() => ({ ids: t.encode(q.text, { add_special_tokens: q.add_special_tokens }).ids })));
} else if (mode === "decode") {
  const t = loadTokenizer(dir);
  for (const ids of lines()) out.push(answer(() => ({ text: t.decode(ids) })));
} else if (mode === "random-ids") {
  const t = loadTokenizer(dir);
  const size = t.model.vocab.length;
  let state = 12345;  // a fixed LCG: the same lists on every run
  const next = () => (state = (state * 1103515245 + 12345) % 2147483648);
  for (let i = 0; i < Number(arg1); ++i) {
    const ids = [];
    for (let k = 0; k < 1 + (next() % 24); ++k) {
      let id = next() % size;
      while (t.model.vocab[id] === undefined) id = (id + 1) % size;
      ids.push(id);
    }
    out.push(JSON.stringify(ids));
  }
} else if (mode === "render") {
  for (const q of lines()) out.push(answer(() => ({ text: new Template(q.template).render(q.context) })));
} else if (mode === "bench") {
  const t = loadTokenizer(dir);
  const text = fs.readFileSync(arg1, "utf8");
  const rounds = Number(arg2 ?? 3);
  let best = Infinity, ids = 0;
  for (let r = 0; r < rounds; ++r) {
    const start = process.hrtime.bigint();
    ids = t.encode(text, { add_special_tokens: false }).ids.length;
    best = Math.min(best, Number(process.hrtime.bigint() - start) / 1e9);
  }
  const bytes = Buffer.byteLength(text, "utf8");
  out.push(JSON.stringify({ bytes, ids, seconds: best, mb_per_s: bytes / 1e6 / best }));
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
process.stdout.write(out.map((l) => l + "\n").join(""));
