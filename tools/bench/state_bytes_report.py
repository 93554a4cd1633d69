#!/usr/bin/env python3
"""State bytes per session for each mechanism next to the softmax KV cache at 4K, 32K and 1M tokens,
for a model shape (steady info --preset ...). Usage: state_bytes_report.py BIN_DIR [PRESET ...]"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from units import human  # noqa: E402

MECHANISMS = [
    ("softmax (KV cache)", ["--mechanism", "softmax"]),
    ("taylor P=2", ["--mechanism", "taylor", "--order", "2"]),
    ("taylor P=3", ["--mechanism", "taylor", "--order", "3"]),
    ("taylor P=4", ["--mechanism", "taylor", "--order", "4"]),
    ("slay (R=2, P=8, M=16)", ["--mechanism", "slay"]),
    ("dark (m=256)", ["--mechanism", "dark"]),
    ("sliced_relu (64 bins)", ["--mechanism", "sliced_relu"]),
    ("sliced_relu_bump (64 bins)", ["--mechanism", "sliced_relu_bump"]),
    ("sliding_window W=4096", ["--mechanism", "sliding_window", "--param", "window=4096"]),
]
CONTEXTS = [("4K", 4096), ("32K", 32768), ("1M", 1 << 20)]


def info(bin_dir, preset, args):
    out = subprocess.run([bin_dir + "/steady", "info", "--preset", preset] + args, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    bin_dir = sys.argv[1]
    for preset in sys.argv[2:] or ["tiny", "llama1b"]:
        print("\n%s shape (accumulation kahan / plain):\n" % preset)
        print("| mechanism | " + " | ".join(name for name, _ in CONTEXTS) + " |")
        print("|---|" + "---|" * len(CONTEXTS))
        for label, args in MECHANISMS:
            kahan = info(bin_dir, preset, args)
            plain = info(bin_dir, preset, args + ["--param", "accumulation=plain"])
            cells = []
            for _, tokens in CONTEXTS:
                k = kahan["state_bytes_per_session"] + kahan["kv_cache_bytes_per_token"] * tokens
                p = plain["state_bytes_per_session"] + plain["kv_cache_bytes_per_token"] * tokens
                cells.append(human(k) if k == p else "%s / %s" % (human(k), human(p)))
            print("| %s | %s |" % (label, " | ".join(cells)))


if __name__ == "__main__":
    main()
