#!/usr/bin/python3
"""The conversion's quality table (docs/conversion.md): `steady eval` of the softmax teacher, its
training-free constant-state servings (taylor, an untrained window) and the converted checkpoints, all
in one run on the same tokens, plus a plot of each conversion's validation perplexity against steps.

    /usr/bin/python3 tools/train/conversion_table.py --bin build/bin --teacher models/tiny-softmax \\
        --converted /tmp/steady-convert --data corpus-data/valid.txt [--max-tokens 16384] \\
        [--context 256] [--plot docs/img/conversion.png] [--json OUT]

--converted: a directory of tiny-softmax-to-* checkpoints (tools/train/convert_shipped.sh) or one
checkpoint; each row's training.json gives its cost (steps, tokens, CPU seconds). Every row runs the
recurrent decode path (one token per step), the session restarted every --context tokens.
"""
import argparse
import json
import os
import subprocess
import sys

BASELINES = [  # (label, extra `steady eval` flags on the teacher)
    ("softmax teacher (KV cache)", []),
    ("taylor P=3 (training-free)", ["--mechanism", "taylor", "--order", "3"]),
    ("sliding_window W=16 (training-free)", ["--mechanism", "sliding_window", "--param", "window=16"]),
]


def steady_eval(args, model, extra):
    cmd = [os.path.join(args.bin, "steady"), "eval", "--model", model, "--data", args.data, "--json",
           "--max-tokens", str(args.max_tokens), "--context", str(args.context), "--threads", "1"] + extra
    return json.loads(subprocess.run(cmd, check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout)


def converted_dirs(path):
    if os.path.isfile(os.path.join(path, "config.json")):
        return [path]
    return sorted(os.path.join(path, d) for d in os.listdir(path)
                  if os.path.isfile(os.path.join(path, d, "training.json")) and not d.endswith(".convert"))


def cost(info):
    c = info.get("costs", {})
    steps = {s: c.get(s, {}).get("steps", 0) for s in ("stage1", "stage2")}
    cpu = sum(v.get("cpu_seconds", 0) for v in c.values())
    tokens = sum(c.get(s, {}).get("tokens", 0) for s in ("stage1", "stage2"))
    return "%d + %d steps, %.2fM tokens, %.0f CPU s" % (steps["stage1"], steps["stage2"], tokens / 1e6, cpu)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.2))
    teacher = None
    for name, info in rows:
        hist = info.get("history", [])
        stage1 = max([h["step"] for h in hist if h["stage"] == "stage1"] or [0])
        # Finetune steps from 0; the attention transfer before it, at negative steps.
        xs = [(h["step"] if h["stage"] == "stage2" else h["step"] - stage1) for h in hist]
        ax.plot(xs, [h["valid_ppl"] for h in hist], marker=".", label=name)
        teacher = (info.get("teacher_valid") or {}).get("ppl", teacher)
    if teacher:
        ax.axhline(teacher, color="k", ls="--", lw=1, label="teacher (no finetune)")
    ax.axvline(0, color="0.85", lw=0.8)
    ax.set_xlabel("stage 2 (finetune) step; stage 1 (attention transfer) before 0")
    ax.set_ylabel("validation perplexity (trainer, 16K tokens)")
    ax.set_title("tiny-softmax converted: validation perplexity against steps")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def stage_figures(info):
    """The trainer's validation perplexity of one conversion: (at initialization, after stage 1 alone,
    after stages 1 + 2 or None). A target with nothing to train in stage 1 is its initialization."""
    hist = info.get("history", [])
    init = next((h["valid_ppl"] for h in hist if h["stage"] == "init"), None)
    stage1 = next((h["valid_ppl"] for h in hist if h["stage"] == "stage1"), init)
    stage2 = [h for h in hist if h["stage"] == "stage2"]
    return init, stage1, (stage2[-1]["valid_ppl"] if stage2 else None)


def stages_table(infos, reports):
    """The gap to the teacher after stage 1 alone and after stages 1 + 2 (trainer's evaluation, the same
    tokens for every row), beside the engine's state bytes per session."""
    print("| conversion | state bytes / session | at init | after stage 1 | after stages 1 + 2 | steps (1 + 2) |")
    print("|---|---|---|---|---|---|")
    for name, info in infos:
        teacher = (info.get("teacher_valid") or {}).get("ppl")
        init, stage1, final = stage_figures(info)
        steps = {s: info.get("costs", {}).get(s, {}).get("steps", 0) for s in ("stage1", "stage2")}

        def gap(ppl):
            return "-" if ppl is None or not teacher else "%.2f (%+.2f%%)" % (ppl, 100 * (ppl / teacher - 1))
        print("| %s | %s | %s | %s | %s | %d + %d |" % (name, "{:,}".format(reports[name]["peak_session_bytes"]),
                                                       gap(init), gap(stage1), gap(final), steps["stage1"],
                                                       steps["stage2"]))
    teacher = next(((i.get("teacher_valid") or {}).get("ppl") for _, i in infos if i.get("teacher_valid")), None)
    if teacher:
        print("\nteacher (trainer's evaluation): %.2f" % teacher)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--teacher", default="models/tiny-softmax")
    ap.add_argument("--converted", required=True)
    ap.add_argument("--data", default="corpus-data/valid.txt")
    ap.add_argument("--max-tokens", type=int, default=16384)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--plot", help="write the perplexity-against-steps PNG here")
    ap.add_argument("--json", help="write every report here")
    args = ap.parse_args()
    table, infos = [], []
    for label, extra in BASELINES:
        table.append((label, steady_eval(args, args.teacher, extra), "none"))
    for d in converted_dirs(args.converted):
        with open(os.path.join(d, "training.json")) as f:
            info = json.load(f)
        name = os.path.basename(d.rstrip("/"))
        infos.append((name, info))
        table.append((name, steady_eval(args, d, []), cost(info)))
    base = table[0][1]["perplexity"]
    print("| model | perplexity | vs teacher | state bytes / session (peak at --context) | conversion cost |")
    print("|---|---|---|---|---|")
    for label, r, c in table:
        print("| %s | %.2f | %+.2f%% | %s | %s |" % (label, r["perplexity"], 100 * (r["perplexity"] / base - 1),
                                                   "{:,}".format(r["peak_session_bytes"]), c))
    print("\n%d tokens of %s, context %d, device %s" % (table[0][1]["tokens"], args.data, args.context,
                                                      table[0][1]["device"]))
    if infos:
        print()
        stages_table(infos, {label: r for label, r, _ in table})
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"label": l, "report": r, "cost": c} for l, r, c in table], f, indent=2)
    if args.plot and infos:
        plot(infos, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
