#!/usr/bin/env python3
"""Summarises a scripts/gpu_session.sh output folder as the markdown tables of docs/benchmarks.md:
decode rows (tokens/s, step time, bytes per step, bandwidth and its share of the measured copy
bandwidth), the attention kernel alone, softmax vs constant state at long contexts, prefill vs
PyTorch SDPA, the largest number of sessions that fit in the GPU's memory at 32K tokens, and the
shipped models' perplexity on the GPU vs the CPU. Standard library only.

  python3 tools/bench/gpu_report.py OUT_DIR
"""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from units import human  # noqa: E402

# Targets of issue 6: decode at batch >= 64 within 70% of the copy bandwidth, the fused
# state-update kernel alone within 80%.
DECODE_TARGET, KERNEL_TARGET = 0.70, 0.80


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
            return out  # the rest is an error message
    return out


def mechanism(r):
    a = r["attention"]
    return r["mechanism"] + (" P=%d" % a["order"] if "order" in a else "")


def decode_table(rows):
    print("| row | mechanism | B x L | step median (ms) | tokens/s | bytes per step | bandwidth | of copy | attention alone | of copy |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in rows:
        d, a = r["decode"], r.get("attention_alone") or {}
        flags = []
        if d["batch"] >= 64 and not d["state_grows"]:
            flags.append("meets 70%" if d["bandwidth_fraction_of_copy"] >= DECODE_TARGET else "below 70%")
        if a and not d["state_grows"]:
            flags.append("kernel meets 80%" if a["bandwidth_fraction_of_copy"] >= KERNEL_TARGET else "kernel below 80%")
        print("| %s | %s | %d x %d | %.3f | %.0f | %s | %s/s | %.1f%% | %s | %s |" % (
            name, mechanism(r), d["batch"], d["context"], 1e3 * d["step_seconds_median"], d["tokens_per_second"],
            human(d["bytes_per_step"]), human(d["bandwidth_bytes_per_second"]), 100 * d["bandwidth_fraction_of_copy"],
            "%.3f ms" % (1e3 * a["seconds_median"]) if a else "-",
            ("%.1f%%" % (100 * a["bandwidth_fraction_of_copy"]) if a else "-") +
            (" (" + ", ".join(flags) + ")" if flags else "")))


def sessions_table(rows, memory_bytes):
    # Sessions that fit at 32K tokens: (memory - weights) / bytes per session at 32K.
    print("\n| mechanism | bytes per session at 32K tokens | sessions that fit in %s (after the weights) |" % human(memory_bytes))
    print("|---|---|---|")
    seen = set()
    for _, r in rows:
        m = mechanism(r)
        if m in seen:
            continue
        seen.add(m)
        d = r["decode"]
        per = r["state_bytes_per_session"]
        if d["state_grows"]:
            layers, kv, hd = r["model"]["layers"], r["model"]["kv_heads"], r["model"]["head_dim"]
            per = 32768 * layers * kv * 2 * hd * 4  # fp32 KV cache rows
        free = memory_bytes - r["weight_bytes"]
        print("| %s | %s | %d |" % (m, human(per), int(free // per) if per > 0 else 0))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "bench", "*.json"))):
        reports = [r for r in load_reports(path) if isinstance(r, dict) and "decode" in r]
        name = os.path.basename(path)[:-5]
        for r in reports:
            d = r["decode"]
            rows.append((name if len(reports) == 1 else "%s b%d L%d" % (name, d["batch"], d["context"]), r))
    if rows:
        r0 = rows[0][1]
        print("Device: %s; copy bandwidth %s/s (read + written); weights %s per step.\n" % (
            r0["device"], human(r0["copy_bandwidth_bytes_per_second"]), human(r0["weight_bytes"])))
        decode_table(rows)
        memory = 0
        smi = os.path.join(out, "nvidia-smi.csv")
        if os.path.exists(smi):
            with open(smi) as f:
                last = f.read().strip().splitlines()[-1].split(",")
            try:
                memory = float(last[1].strip().split()[0]) * 1024 * 1024  # MiB
            except (IndexError, ValueError):
                memory = 0
        if memory > 0:
            sessions_table(rows, memory)
        prefill = [(n, r) for n, r in rows if r.get("prefill")]
        sdpa = load(os.path.join(out, "sdpa.json"))
        if prefill or sdpa:
            print("\n| prefill | tokens | tokens/s |")
            print("|---|---|---|")
            for name, r in prefill:
                p = r["prefill"]
                print("| steady %s, whole model (%s) | %d | %.0f |" % (mechanism(r), name, p["tokens"], p["tokens_per_second"]))
            for row in (sdpa or {}).get("rows", []):
                print("| PyTorch SDPA flash, attention only | %d | %.0f |" % (row["tokens"], row["tokens_per_second"]))
    evals = sorted(glob.glob(os.path.join(out, "eval-*-cuda.json")))
    if evals:
        print("\n| model | perplexity cuda | perplexity cpu | decode tokens/s cuda | cpu |")
        print("|---|---|---|---|---|")
        for path in evals:
            g, c = load(path), load(path.replace("-cuda.json", "-cpu.json"))
            if not g or not c:
                # The file holds the error instead (e.g. a mechanism without CUDA kernels).
                with open(path if not g else path.replace("-cuda.json", "-cpu.json")) as f:
                    why = f.read().strip().splitlines()[-1:] or ["no output"]
                print("| %s | failed: %s | | | |" % (os.path.basename(path)[5:-10], why[0].replace("|", "/")[:120]))
                continue
            print("| %s | %.3f | %.3f | %.0f | %.0f |" % (os.path.basename(path)[5:-10], g["perplexity"], c["perplexity"],
                                                      g["decode_tokens_per_second"], c["decode_tokens_per_second"]))


if __name__ == "__main__":
    main()
