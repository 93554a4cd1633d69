#!/usr/bin/env python3
"""The tables of a GPU run (scripts/gpu_session.sh), ready to paste into docs/benchmarks.md with the
device's name: every figure issue 24 asks of a lent GPU, each beside its goal.

  1. decode at the llama1b shape, batch 1 to 256: step time, tokens/s, bytes per step and their share
     of the measured copy bandwidth (goal: 70% from batch 64), and the state kernel alone (goal: 80%);
  2. constant-state decode against the softmax KV cache at 1K, 32K and 128K tokens;
  3. sessions that fit in the GPU's memory at 32K tokens, per mechanism, against the KV cache
     (goal: at least 100x);
  4. prefill attention against PyTorch SDPA (FlashAttention) at 8K, 32K and 128K tokens;
  5. the shipped models' perplexity on the GPU against the CPU; 6. logits against Hugging Face
     transformers; 7. the test counts.

Standard library only (it runs under the GPU image's python3 and this machine's).

  python3 tools/bench/gpu_report.py LOG_DIR        the report (LOG_DIR: the run's logs/ folder, or any
                                                   folder with bench/*.json, eval/*.json, sdpa.json,
                                                   hf_compare.json, nvidia-smi.csv, tests/*/results.tsv)
  python3 tools/bench/gpu_report.py --brief FILE   one line about a steady bench --json file
  python3 tools/bench/gpu_report.py --dry-args ... the bench flags shrunk for the dry run (tiny shape,
                                                   short contexts), one per line
"""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from units import human  # noqa: E402

# Goals of issue 24: decode at batch >= 64 at 70% of the copy bandwidth, the state kernel alone at
# 80%; at 32K tokens at least 100 times the sessions of a softmax KV cache.
DECODE_GOAL, KERNEL_GOAL, SESSIONS_GOAL = 0.70, 0.80, 100
SESSION_CONTEXT = 32768


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def load_reports(path):
    """A steady bench --json file: one report, or several as JSON Lines (lists of --batch/--context)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return []
    try:
        return [json.loads(text)]
    except ValueError:
        pass
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            break  # the rest is an error message
    return [r for r in out if isinstance(r, dict) and "decode" in r]


def mechanism(r):
    a = r["attention"]
    return r["mechanism"] + (" P=%d" % a["order"] if "order" in a else "")


def kv_bytes_per_token(r):
    """What a session's growing state (the KV cache) holds per token, as the report measured it: the
    bytes read per step are each slot's BytesInUse before the step, at positions context + warm-up
    steps + i over the timed steps i."""
    d = r["decode"]
    tokens = d["context"] + d.get("warmup_steps", 0) + (d["steps"] - 1) / 2.0
    return (d["state_bytes_read_per_step"] / d["batch"] - r["state_bytes_per_session"]) / max(tokens, 1)


def kv_dtype(r):
    """The softmax cache's element size as measured: bytes per cached token and layer vs the shape."""
    d, m = r["decode"], r["model"]
    if not d["state_grows"]:
        return ""
    per_token = kv_bytes_per_token(r)
    elements = m["layers"] * m["kv_heads"] * 2 * m["head_dim"]
    return " (%s KV)" % {2: "bf16", 4: "fp32"}.get(round(per_token / elements), "%.1f-byte" % (per_token / elements))


def session_bytes(r, context):
    """Bytes one session holds at `context` tokens: the fixed state, plus the KV cache's per-token
    bytes as this report measured them (BytesInUse before a step, per slot)."""
    fixed = r["state_bytes_per_session"]
    return fixed + kv_bytes_per_token(r) * context if r["decode"]["state_grows"] else fixed


def ms(seconds):
    return "%.3f" % (1e3 * seconds)


def pct(x):
    return "%.1f%%" % (100 * x)


def device_line(out, rows):
    smi = os.path.join(out, "nvidia-smi.csv")
    name, memory = "", 0
    if os.path.exists(smi):
        with open(smi) as f:
            lines = [l for l in f.read().strip().splitlines() if l and not l.startswith("name")]
        if lines:
            parts = [p.strip() for p in lines[-1].split(",")]
            name = parts[0]
            try:
                memory = float(parts[1].split()[0]) * 1024 * 1024  # MiB
            except (IndexError, ValueError):
                memory = 0
    if rows:
        name = rows[0][1]["device"]
    return name, memory


def decode_table(rows):
    print("| row | mechanism | B x L | step median (ms) | tokens/s | bytes per step | bandwidth | of copy | state kernel alone (ms) | of copy |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in rows:
        d, a = r["decode"], r.get("attention_alone") or {}
        flags = []
        if d["batch"] >= 64 and not d["state_grows"]:
            flags.append("meets 70%" if d["bandwidth_fraction_of_copy"] >= DECODE_GOAL else "below 70%")
        if a and not d["state_grows"]:
            flags.append("kernel meets 80%" if a["bandwidth_fraction_of_copy"] >= KERNEL_GOAL else "kernel below 80%")
        print("| %s | %s%s | %d x %d | %s | %.0f | %s | %s/s | %s | %s | %s |" % (
            name, mechanism(r), kv_dtype(r), d["batch"], d["context"], ms(d["step_seconds_median"]),
            d["tokens_per_second"], human(d["bytes_per_step"]), human(d["bandwidth_bytes_per_second"]),
            pct(d["bandwidth_fraction_of_copy"]), ms(a["seconds_median"]) if a else "-",
            (pct(a["bandwidth_fraction_of_copy"]) if a else "-") + (" (" + ", ".join(flags) + ")" if flags else "")))


def goals(rows):
    """The two bandwidth goals, over the constant-state rows at batch >= 64."""
    big = [(n, r) for n, r in rows if r["decode"]["batch"] >= 64 and not r["decode"]["state_grows"]]
    if not big:
        return
    print()
    for what, key, goal in (("decode step", "decode", DECODE_GOAL), ("state kernel alone", "attention_alone", KERNEL_GOAL)):
        vals = [(n, r[key]["bandwidth_fraction_of_copy"]) for n, r in big if r.get(key)]
        if not vals:
            continue
        met = [n for n, v in vals if v >= goal]
        best = max(vals, key=lambda x: x[1])
        print("- Goal, %s at batch >= 64: %s of the copy bandwidth: %s (best %s, %s)." % (
            what, pct(goal), "met by %d of %d rows" % (len(met), len(vals)) if met else "not met", pct(best[1]), best[0]))


def versus_softmax(rows):
    """Constant state against the softmax KV cache, batch 1, matched by context."""
    by = {}
    for _, r in rows:
        d = r["decode"]
        if d["batch"] != 1:
            continue
        same = by.setdefault(mechanism(r) + kv_dtype(r), {})
        if d["context"] not in same or d["steps"] > same[d["context"]]["decode"]["steps"]:
            same[d["context"]] = r  # the row timed over the most steps
    softmax = {k: v for k, v in by.items() if k.startswith("softmax")}
    constant = {k: v for k, v in by.items() if not k.startswith("softmax")}
    if not softmax or not constant:
        return
    print("\n| context | mechanism | step (ms) | tokens/s | bytes per session | softmax step (ms) | softmax / it |")
    print("|---|---|---|---|---|---|---|")
    for sname, srows in sorted(softmax.items()):
        for ctx in sorted(srows):
            s = srows[ctx]
            for cname, crows in sorted(constant.items()):
                if ctx not in crows:
                    continue
                c = crows[ctx]
                print("| %d | %s vs %s | %s | %.0f | %s vs %s | %s | %.2fx |" % (
                    ctx, cname, sname, ms(c["decode"]["step_seconds_median"]), c["decode"]["tokens_per_second"],
                    human(session_bytes(c, ctx)), human(session_bytes(s, ctx)), ms(s["decode"]["step_seconds_median"]),
                    s["decode"]["step_seconds_median"] / c["decode"]["step_seconds_median"]))


def sessions_table(rows, memory_bytes):
    """Sessions that fit at 32K tokens: (memory - weights) / bytes per session, per mechanism."""
    seen = {}
    for _, r in rows:
        seen.setdefault(mechanism(r) + kv_dtype(r), r)
    kv = {k: session_bytes(r, SESSION_CONTEXT) for k, r in seen.items() if r["decode"]["state_grows"]}
    print("\n| mechanism | bytes per session at %dK tokens | sessions that fit in %s (after the weights) | %s |" % (
        SESSION_CONTEXT // 1024, human(memory_bytes), " | ".join("x %s" % k for k in sorted(kv)) or "-"))
    print("|---|---|---|%s" % ("---|" * max(len(kv), 1)))
    for m, r in sorted(seen.items()):
        per = session_bytes(r, SESSION_CONTEXT)
        fit = int((memory_bytes - r["weight_bytes"]) // per) if per > 0 else 0
        ratios = []
        for k in sorted(kv):
            ratio = kv[k] / per
            ratios.append("%.1fx%s" % (ratio, "" if r["decode"]["state_grows"] else
                                       (" (meets %dx)" % SESSIONS_GOAL if ratio >= SESSIONS_GOAL else " (below %dx)" % SESSIONS_GOAL)))
        print("| %s | %s | %d | %s |" % (m, human(per), fit, " | ".join(ratios) or "-"))


def prefill_rows(rows):
    out = []
    for name, r in rows:
        p = r.get("prefill")
        for x in p if isinstance(p, list) else ([p] if p else []):
            out.append((name, r, x))
    return out


def prefill_table(rows, sdpa):
    prefills = prefill_rows(rows)
    if not prefills and not sdpa:
        return
    by_tokens = {}
    for name, r, p in prefills:
        by_tokens.setdefault(p["tokens"], []).append((name, r, p))
    sd = {row["tokens"]: row for row in (sdpa or {}).get("rows", [])}
    print("\n| tokens | implementation | attention alone, one layer (ms) | tokens/s | whole model prefill tokens/s | SDPA / it |")
    print("|---|---|---|---|---|---|")
    for n in sorted(set(by_tokens) | set(sd)):
        if n in sd:
            print("| %d | PyTorch %s SDPA (%s), %s | %s | %.0f | - | 1.00x |" % (
                n, sdpa.get("torch", ""), sdpa.get("backend", "flash"), sdpa.get("dtype", "bf16"), ms(sd[n]["seconds"]),
                sd[n]["tokens_per_second"]))
        for name, r, p in by_tokens.get(n, []):
            a = p.get("attention_alone")
            print("| %d | steady %s (%s) | %s | %s | %.0f | %s |" % (
                n, mechanism(r) + kv_dtype(r), name, ms(a["seconds_median"]) if a else "-",
                "%.0f" % a["tokens_per_second"] if a else "-", p["tokens_per_second"],
                "%.2fx" % (sd[n]["seconds"] / a["seconds_median"]) if a and n in sd else "-"))


def eval_table(out):
    evals = sorted(glob.glob(os.path.join(out, "eval", "*-cuda.json")))
    if not evals:
        return
    print("\n| model | perplexity cuda | perplexity cpu | relative difference | decode tokens/s cuda | cpu |")
    print("|---|---|---|---|---|---|")
    for path in evals:
        model = os.path.basename(path)[:-len("-cuda.json")]
        g, c = load(path), load(path.replace("-cuda.json", "-cpu.json"))
        if not g or not c:
            bad = path if not g else path.replace("-cuda.json", "-cpu.json")
            err = bad[:-5] + ".err"
            why = "no output"
            if os.path.exists(err):
                with open(err) as f:
                    lines = f.read().strip().splitlines()
                why = lines[-1] if lines else why
            print("| %s | failed: %s | | | | |" % (model, why.replace("|", "/")[:120]))
            continue
        print("| %s | %.4f | %.4f | %.1e | %.0f | %.0f |" % (
            model, g["perplexity"], c["perplexity"], abs(g["perplexity"] - c["perplexity"]) / c["perplexity"],
            g["decode_tokens_per_second"], c["decode_tokens_per_second"]))


def hf_table(out):
    h = load(os.path.join(out, "hf_compare.json"))
    if not h:
        return
    print("\n| checkpoint | steady device | max abs logit difference / max abs logit | greedy tokens agreeing | tolerance | result |")
    print("|---|---|---|---|---|---|")
    for row in h.get("rows", []):
        if "error" in row:
            print("| %s | %s | failed: %s | | | |" % (row["checkpoint"], row.get("device", ""), row["error"].replace("|", "/")[:120]))
            continue
        print("| %s | %s | %.2e | %d of %d | %.0e | %s |" % (
            row["checkpoint"], row["device"], row["max_rel"], row["argmax_agree"], row["tokens"], row["tolerance"],
            "pass" if row["pass"] else "FAIL"))


def tests_table(out):
    files = sorted(glob.glob(os.path.join(out, "tests", "*", "results.tsv")))
    if not files:
        return
    print("\n| test binary | passed | skipped | failed |")
    print("|---|---|---|---|")
    for path in files:
        counts = {"PASSED": 0, "SKIPPED": 0}
        failed = []
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) < 2:
                    continue
                if parts[1] in counts:
                    counts[parts[1]] += 1
                else:
                    failed.append("%s (%s)" % (parts[0], parts[1]))
        print("| %s | %d | %d | %d%s |" % (os.path.basename(os.path.dirname(path)), counts["PASSED"], counts["SKIPPED"],
                                          len(failed), ": " + ", ".join(failed[:6]) if failed else ""))


def report(out):
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "bench", "*.json"))):
        reports = load_reports(path)
        name = os.path.basename(path)[:-5]
        for r in reports:
            d = r["decode"]
            rows.append((name if len(reports) == 1 else "%s b%d L%d" % (name, d["batch"], d["context"]), r))
    device, memory = device_line(out, rows)
    print("GPU run on %s%s." % (device or "an unknown device", ", %s of memory" % human(memory) if memory else ""))
    if rows:
        r0 = rows[0][1]
        print("Copy bandwidth %s/s (read + written); weights %s per step (%s parameters, random, llama1b shape "
              "unless the row says otherwise).\n" % (human(r0["copy_bandwidth_bytes_per_second"]), human(r0["weight_bytes"]),
                                                     "{:,}".format(r0["model"]["parameters"])))
        decode_table(rows)
        goals(rows)
        versus_softmax(rows)
        if memory > 0:
            sessions_table(rows, memory)
    prefill_table(rows, load(os.path.join(out, "sdpa.json")))
    eval_table(out)
    hf_table(out)
    tests_table(out)


def brief(path):
    reports = load_reports(path)
    if not reports:
        print("no report in %s" % os.path.basename(path))
        return
    parts = []
    for r in reports:
        d = r["decode"]
        parts.append("b%d L%d %s ms (%s of copy)" % (d["batch"], d["context"], ms(d["step_seconds_median"]),
                                                     pct(d["bandwidth_fraction_of_copy"])))
    for _, _, p in prefill_rows([("", r) for r in reports]):
        a = p.get("attention_alone")
        parts.append("prefill %d: %.0f tok/s%s" % (p["tokens"], p["tokens_per_second"],
                                                    ", attention %s ms" % ms(a["seconds_median"]) if a else ""))
    print("%d reports: %s" % (len(reports), "; ".join(parts)))


def dry_args(args):
    """Flags for the dry run: the same options on the tiny shape and the CPU, in seconds."""
    out, i = [], 0
    shrink = {"--batch": lambda v: ",".join(str(min(int(x), 2)) for x in v.split(",")[:2]),
              "--context": lambda v: ",".join(str(min(int(x), 64 * (k + 1))) for k, x in enumerate(v.split(",")[:2])),
              "--prefill-tokens": lambda v: ",".join(str(min(int(x), 64 * (k + 1))) for k, x in enumerate(v.split(",")[:2])),
              "--steps": lambda v: "2"}
    while i < len(args):
        a = args[i]
        if a in shrink and i + 1 < len(args):
            out += [a, shrink[a](args[i + 1])]
            i += 2
            continue
        out.append(a)
        i += 1
    return out + ["--copy-bytes", "8388608"]


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--dry-args":
        print("\n".join(dry_args(sys.argv[2:])))
    elif len(sys.argv) == 3 and sys.argv[1] == "--brief":
        brief(sys.argv[2])
    elif len(sys.argv) == 2 and not sys.argv[1].startswith("-"):
        report(sys.argv[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
