#!/usr/bin/env python3
"""Turns decode_bench's JSON (--benchmark_out) into the markdown table of docs/benchmarks.md:
median time per token for each mechanism, context and batch, and the ratio between the longest and
the shortest context (the constant-state target is <= 1.1)."""
import json
import re
import sys


def main(path):
    data = json.load(open(path))
    rows = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name", "median") != "median" or b.get("error_occurred"):
            continue
        m = re.match(r"BM_DecodeStep/mech:(\d+)/context:(\d+)/batch:(\d+)", b["run_name"] if "run_name" in b else b["name"])
        if not m:
            continue
        mech, context, batch = int(m.group(1)), int(m.group(2)), int(m.group(3))
        label = b.get("label", str(mech))
        us_per_token = b["cpu_time"] / batch if b["time_unit"] == "us" else None
        rows.setdefault((mech, label, batch), {})[context] = (us_per_token, b.get("state_bytes_per_session"))
    contexts = sorted({c for r in rows.values() for c in r})
    names = {1024: "1K", 32768: "32K", 1048576: "1M"}
    head = "| mechanism | batch | " + " | ".join("%s us/token" % names.get(c, c) for c in contexts)
    print(head + " | 1M / 1K | state bytes/session at 1K / 1M |")
    print("|---|---|" + "---|" * len(contexts) + "---|---|")
    for (mech, label, batch), r in sorted(rows.items()):
        cells = ["%.0f" % r[c][0] if c in r else "n/a" for c in contexts]
        lo, hi = contexts[0], contexts[-1]
        ratio = "%.2f" % (r[hi][0] / r[lo][0]) if lo in r and hi in r else "n/a"
        def fmt(x):
            return "n/a" if x is None else ("%.1f MB" % (x / 1e6) if x >= 1e6 else "%.0f KB" % (x / 1e3))
        sb = "%s / %s" % (fmt(r.get(lo, (0, None))[1]), fmt(r.get(hi, (0, None))[1]))
        print("| %s | %d | %s | %s | %s |" % (label, batch, " | ".join(cells), ratio, sb))


if __name__ == "__main__":
    main(sys.argv[1])
