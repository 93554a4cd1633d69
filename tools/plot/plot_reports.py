#!/usr/bin/python3
"""PNG charts from steady-loadtest JSON reports (--json FILE; format in docs/loadtest.md).

  /usr/bin/python3 tools/plot/plot_reports.py REPORT.json ... --out-dir DIR [--prefix NAME]

Writes, for the reports that have them:
  DIR/NAME_concurrency.png  closed-loop reports: TTFT and E2E p50/p90/p99 and output tokens/s vs concurrency
  DIR/NAME_rate.png         open-loop reports: the same vs request rate
  DIR/NAME_turns.png        multi-turn reports: per-turn TTFT and E2E (mean, p90) vs turn number
One line per label (the report's --label, else the server's mechanism). Prints the files written.
Needs Debian's python3-matplotlib.
"""
import argparse
import collections
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402


def label_of(report):
    config = report["config"]
    return config.get("label") or config.get("server", {}).get("mechanism") or "server"


def load_chart(reports, x_key, x_label, path):
    """Latency percentiles and throughput vs load; `reports` all of one mode."""
    series = collections.defaultdict(list)  # label -> [(x, summary)]
    for r in reports:
        series[label_of(r)].append((r["config"][x_key], r["summary"]))
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    styles = {"p50": "-", "p90": "--", "p99": ":"}
    for label, points in sorted(series.items()):
        points.sort(key=lambda p: p[0])
        xs = [p[0] for p in points]
        for ax, metric in ((axes[0], "ttft_ms"), (axes[1], "e2e_ms")):
            for q, style in styles.items():
                ys = [p[1][metric][q] for p in points]
                ax.plot(xs, ys, style, marker="o", markersize=3, label=f"{label} {q}")
        axes[2].plot(xs, [p[1]["output_tokens_per_s"] for p in points], "-", marker="o", markersize=3, label=label)
    for ax, title, unit in ((axes[0], "Time to first token", "ms"), (axes[1], "End-to-end latency", "ms"),
                            (axes[2], "Output throughput", "tokens/s")):
        ax.set_title(title)
        ax.set_xlabel(x_label)
        ax.set_ylabel(unit)
        if x_key == "concurrency":
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted({x for points in series.values() for x, _ in points}))
            ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes[:2]:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes[2].set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def turns_chart(reports, path):
    """Per-turn TTFT and E2E vs turn number, one line per report."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for r in reports:
        label = label_of(r)
        turns = r["turns"]
        xs = [t["turn"] for t in turns]
        for ax, metric in ((axes[0], "ttft_ms"), (axes[1], "e2e_ms")):
            line, = ax.plot(xs, [t[metric]["mean"] for t in turns], "-", label=f"{label} mean")
            ax.plot(xs, [t[metric]["p90"] for t in turns], "--", color=line.get_color(), alpha=0.6,
                    label=f"{label} p90")
    for ax, title in ((axes[0], "Time to first token per turn"), (axes[1], "End-to-end latency per turn")):
        ax.set_title(title)
        ax.set_xlabel("turn (same session)")
        ax.set_ylabel("ms")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="+", help="steady-loadtest --json files")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--prefix", default="loadtest")
    args = parser.parse_args()

    by_mode = collections.defaultdict(list)
    for path in args.reports:
        with open(path) as f:
            report = json.load(f)
        if report.get("format") != "steady-loadtest/1":
            sys.exit(f"plot_reports: {path}: not a steady-loadtest/1 report")
        by_mode[report["config"]["mode"]].append(report)

    os.makedirs(args.out_dir, exist_ok=True)
    written = []
    for mode, x_key, x_label, suffix in (("closed_loop", "concurrency", "concurrency (closed loop)", "concurrency"),
                                         ("open_loop", "request_rate", "request rate (requests/s)", "rate")):
        if by_mode[mode]:
            path = os.path.join(args.out_dir, f"{args.prefix}_{suffix}.png")
            load_chart(by_mode[mode], x_key, x_label, path)
            written.append(path)
    if by_mode["multi_turn"]:
        path = os.path.join(args.out_dir, f"{args.prefix}_turns.png")
        turns_chart(by_mode["multi_turn"], path)
        written.append(path)
    for path in written:
        print(path)


if __name__ == "__main__":
    main()
