#!/usr/bin/python3
"""DARKFormer's finetuning comparison (docs/conversion.md): dark against performer at equal features and
steps over several seeds, from the trainer's own validation in each run's training.json.

    /usr/bin/python3 tools/train/convert_compare.py --runs /tmp/steady-convert \\
        [--arms dark_ft,performer_ft] [--plot docs/img/conversion-compare.png] [--json OUT] \\
        [--control /tmp/steady-convert/tiny-softmax-to-finetuned]

--runs holds the checkpoints tools/train/convert_shipped.sh writes (tiny-softmax-to-ARM for seed 1,
tiny-softmax-to-ARM-sSEED for the others). Prints, for every validation step, each arm's mean
perplexity and next-token accuracy over its seeds with their range (min..max), and the first arm's
mean against the second's; the plot shows both against steps, a band for the range.
"""
import argparse
import json
import os
import re
import sys


def load_arm(root, arm):
    """{seed: training.json} of one arm's finished runs."""
    out = {}
    for name in sorted(os.listdir(root)):
        m = re.fullmatch(r"tiny-softmax-to-%s(?:-s(\d+))?" % re.escape(arm), name)
        path = os.path.join(root, name, "training.json")
        if m and os.path.isfile(path):
            with open(path) as f:
                out[int(m.group(1) or 1)] = json.load(f)
    return out


def curves(runs, key, seeds=None):
    """{step: [value per seed]} over the steps every seed validated at (init is step 0), seeds in
    `seeds`' order (default: all, ascending)."""
    seeds = sorted(runs) if seeds is None else seeds
    per_seed = [{h["step"] if h["stage"] != "init" else 0: h[key] for h in runs[seed]["history"]
                 if h["stage"] in ("init", "stage2")} for seed in seeds]
    steps = sorted(set.intersection(*(set(c) for c in per_seed))) if per_seed else []
    return {s: [c[s] for c in per_seed] for s in steps}


def mean(xs):
    return sum(xs) / len(xs)


def cpu_seconds(info):
    return sum(v.get("cpu_seconds", 0) for v in info.get("costs", {}).values())


def report(arms, runs):
    a, b = arms[0], arms[1]
    paired = sorted(set(runs[a]) & set(runs[b]))  # the same seed: the same features and batches
    ppl = {arm: curves(runs[arm], "valid_ppl", paired) for arm in (a, b)}
    acc = {arm: curves(runs[arm], "valid_acc", paired) for arm in (a, b)}
    steps = sorted(set(ppl[a]) & set(ppl[b]))
    print("seeds (paired): %s" % paired)
    print("| step | %s ppl (min..max) | %s ppl (min..max) | mean / mean - 1 | per seed: %s / %s - 1 (min..max) "
          "| %s acc (min..max) | %s acc (min..max) |" % (a, b, a, b, a, b))
    print("|---|---|---|---|---|---|---|")
    rows = []
    for s in steps:
        pa, pb = ppl[a][s], ppl[b][s]
        ratio = [x / y - 1 for x, y in zip(pa, pb)]
        rows.append({"step": s, "ppl": {a: pa, b: pb}, "acc": {a: acc[a][s], b: acc[b][s]}, "paired_ratio": ratio})
        print("| %d | %.2f (%.2f..%.2f) | %.2f (%.2f..%.2f) | %+.2f%% | %+.2f%% (%+.2f..%+.2f) | %.4f (%.4f..%.4f) "
              "| %.4f (%.4f..%.4f) |" % (
                  s, mean(pa), min(pa), max(pa), mean(pb), min(pb), max(pb), 100 * (mean(pa) / mean(pb) - 1),
                  100 * mean(ratio), 100 * min(ratio), 100 * max(ratio), mean(acc[a][s]), min(acc[a][s]),
                  max(acc[a][s]), mean(acc[b][s]), min(acc[b][s]), max(acc[b][s])))
    for arm in arms:
        cpu = [cpu_seconds(info) for info in runs[arm].values()]
        print("%s: %d runs, CPU seconds per run %s" % (arm, len(cpu), ", ".join("%.0f" % c for c in cpu)))
    teacher = next(iter(runs[a].values())).get("teacher_valid")
    if teacher:
        print("teacher (no finetune): ppl %.2f, acc %.4f" % (teacher["ppl"], teacher["acc"]))
    return {"rows": rows, "teacher": teacher, "seeds": {arm: sorted(runs[arm]) for arm in arms},
            "cpu_seconds": {arm: [cpu_seconds(i) for i in runs[arm].values()] for arm in arms}}


def plot(arms, runs, labels, path, control=None, title=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    teacher = next(iter(runs[arms[0]].values())).get("teacher_valid") or {}
    for ax, key, tkey, ylabel in ((axes[0], "valid_ppl", "ppl", "validation perplexity"),
                                  (axes[1], "valid_acc", "acc", "next-token accuracy")):
        for arm in arms:
            c = curves(runs[arm], key)
            xs = sorted(c)
            line, = ax.plot(xs, [mean(c[s]) for s in xs], marker=".",
                            label="%s (mean of %d seeds, band: range)" % (labels.get(arm, arm), len(runs[arm])))
            ax.fill_between(xs, [min(c[s]) for s in xs], [max(c[s]) for s in xs], color=line.get_color(), alpha=0.2)
        if tkey in teacher:
            ax.axhline(teacher[tkey], color="k", ls="--", lw=1, label="softmax teacher (not finetuned)")
        if control:
            c = curves({1: control}, key)
            xs = sorted(c)
            ax.plot(xs, [c[s][0] for s in xs], color="k", ls=":", marker=".", lw=1,
                    label="softmax teacher finetuned alike (seed 1)")
        ax.set_xlabel("finetune step (batch 8 x 256 tokens)")
        ax.set_ylabel(ylabel + " (trainer, 16K tokens)")
        ax.legend(fontsize=7)
    axes[0].set_ylim(top=min(axes[0].get_ylim()[1], 2.0 * (teacher.get("ppl") or 1e9)))
    fig.suptitle(title or "tiny-softmax finetuned into random-feature attention, 64 features: dark vs performer")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", required=True)
    ap.add_argument("--arms", default="dark_ft,performer_ft", help="two or more convert_shipped.sh targets")
    ap.add_argument("--label", action="append", default=[], help="ARM=text for the plot's legend")
    ap.add_argument("--plot")
    ap.add_argument("--title", help="the plot's title")
    ap.add_argument("--control", help="a run of the teacher finetuned alike (convert_shipped.sh finetuned) to plot")
    ap.add_argument("--json")
    args = ap.parse_args()
    arms = args.arms.split(",")
    runs = {arm: load_arm(args.runs, arm) for arm in arms}
    missing = [arm for arm in arms if not runs[arm]]
    if len(arms) < 2 or missing:
        print("convert_compare: need two arms with finished runs under %s (none for %s)" % (args.runs, missing),
              file=sys.stderr)
        return 2
    out = report(arms, runs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    if args.plot:
        control = None
        if args.control:
            with open(os.path.join(args.control, "training.json")) as f:
                control = json.load(f)
        plot(arms, runs, dict(l.split("=", 1) for l in args.label), args.plot, control, args.title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
