#!/usr/bin/env python3
"""The shipped models' quality table (docs/models.md, README): `steady eval` of every model and serving
mechanism on the validation split, plus a greedy sample of each.

    /usr/bin/python3 tools/bench/quality_table.py --bin build/bin --models models \\
        --data corpus-data/valid.txt [--max-tokens 32768] [--context 256] [--jobs 2] [--json OUT]

Every row is measured the same way: the first --max-tokens tokens of the data through the recurrent
decode path (one token per step, CPU), the session restarted every --context tokens (the training
length). Columns: perplexity, its ratio to tiny-softmax's, state bytes per session (the peak: a growing
state, softmax's KV cache or the exact sliced tree, at --context tokens), decode tokens/s as measured by that eval (one session, batch 1; timings share the
machine with the other --jobs). Prints a markdown table, then the samples.
"""
import argparse
import concurrent.futures
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from units import human  # noqa: E402

# (model directory, label, extra `steady` flags)
ROWS = [
    ("tiny-softmax", "softmax (KV cache)", []),
    ("tiny-softmax", "taylor P=2", ["--mechanism", "taylor", "--order", "2"]),
    ("tiny-softmax", "taylor P=3", ["--mechanism", "taylor", "--order", "3"]),
    ("tiny-softmax", "taylor P=4", ["--mechanism", "taylor", "--order", "4"]),
    ("tiny-softmax", "taylor P=5", ["--mechanism", "taylor", "--order", "5"]),
    ("tiny-softmax", "sliding_window W=64", ["--mechanism", "sliding_window", "--param", "window=64"]),
    ("tiny-softmax", "sliding_window W=128", ["--mechanism", "sliding_window", "--param", "window=128"]),
    ("tiny-slay", "slay", []),
    ("tiny-dark", "dark", []),
    ("tiny-performer", "performer (dark, M = I)", []),
    ("tiny-sliced", "sliced_relu, bucketed (served)", []),
    ("tiny-sliced", "sliced_relu, exact decoder", ["--mechanism", "sliced_relu", "--param", "decoder=\"exact\""]),
]
PROMPT = "The whale"


def run_row(args, row):
    model, label, extra = row
    path = os.path.join(args.models, model)
    cmd = [os.path.join(args.bin, "steady"), "eval", "--model", path, "--data", args.data, "--json",
           "--max-tokens", str(args.max_tokens), "--context", str(args.context)] + extra
    report = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    sample = subprocess.run([os.path.join(args.bin, "steady"), "generate", "--model", path, "--prompt", PROMPT,
                             "--max-tokens", str(args.sample_tokens), "--temperature", "0"] + extra,
                            check=True, capture_output=True, text=True).stdout
    return {"model": model, "served_as": label, "flags": extra, "report": report, "sample": PROMPT + sample}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--models", default="models")
    ap.add_argument("--data", default="corpus-data/valid.txt")
    ap.add_argument("--max-tokens", type=int, default=32768)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--sample-tokens", type=int, default=48)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--only", help="comma-separated model directories to evaluate")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    rows = [r for r in ROWS if os.path.isdir(os.path.join(args.models, r[0]))]
    if args.only:
        rows = [r for r in rows if r[0] in args.only.split(",")]
    if not rows:
        sys.exit("quality_table: no model directories under %s" % args.models)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda r: run_row(args, r), rows))
    base = next((r["report"]["perplexity"] for r in results if r["served_as"].startswith("softmax")), None)
    print("| model | served as | perplexity | vs softmax | state bytes / session | decode tokens/s |")
    print("|---|---|---|---|---|---|")
    for r in results:
        rep = r["report"]
        state = rep["peak_session_bytes"]  # the fixed state, plus what grows (KV cache, exact sliced tree)
        note = " (grows; at %d tokens)" % args.context if state > rep["state_bytes_per_session"] else ""
        ratio = "%.3f" % (rep["perplexity"] / base) if base else "-"
        print("| %s | %s | %.2f | %s | %s%s | %.0f |" % (r["model"], r["served_as"], rep["perplexity"], ratio,
                                                         human(state), note, rep["decode_tokens_per_second"]))
    print("\n%d tokens of %s, session restarted every %d tokens.\n" % (
        results[0]["report"]["tokens"], args.data, args.context))
    for r in results:
        print("- %s, %s: %s" % (r["model"], r["served_as"], json.dumps(r["sample"])))
    print("\n| model | parameters | steps | tokens | training time | tokens/s | trainer's valid loss (ppl) |")
    print("|---|---|---|---|---|---|---|")
    for model in sorted({r[0] for r in rows}):
        path = os.path.join(args.models, model, "training.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            t = json.load(f)
        print("| %s | %s | %d | %s | %.0f min | %d | %.3f (%.1f) |" % (
            model, "{:,}".format(t["parameters"]), t["steps"], "{:,}".format(t["tokens"]), t["seconds"] / 60,
            t["tokens_per_second"], t["valid_loss"], math.exp(t["valid_loss"])))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
