#!/usr/bin/python3
"""The table of `tools/bench/peer_llamacpp.sh gguf` (docs/gguf.md) from its RESULTS folder, and the
verdict: exit 1 when a comparison is over its bound or a tokenizer differs.

    /usr/bin/python3 tools/gguf/gguf_report.py RESULTS_DIR
"""
import glob
import json
import os
import sys

TYPES = ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k_m", "q5_k_m", "q6_k", "q2_k", "q3_k_m", "iq4_nl", "iq4_xs")
# Files all of whose tensor types Steady holds with the file's values exactly (docs/gguf.md): all of
# them since Q4_1 and Q5_1 are held as q4_1 and q5_1 (2026-11-28), not as bf16; Q2_K, Q3_K, IQ4_NL and
# IQ4_XS since 2026-11-29.
EXACT_TYPES = TYPES


def main():
    r, bad = sys.argv[1], False

    def row(label, prompts, bound, exact):
        nonlocal bad
        rel = max(p["max_logit_diff_over_std"] for p in prompts)
        ok = rel <= bound and (not exact or all(p["identical"] for p in prompts))
        bad |= not ok
        print(f"| {label} | {sum(p['identical'] for p in prompts)}/{len(prompts)} | "
              f"{sum(p['agreeing_tokens'] for p in prompts)} of {sum(p['generated_llama_cpp'] for p in prompts)} | "
              f"{max(p['max_abs_logit_diff'] for p in prompts):.2e} | {rel:.2e} | {bound:g} |" + ("" if ok else " FAILED"))

    def prompts(name):
        return json.load(open(os.path.join(r, name)))["prompts"]

    print("| Steady `--model FILE.gguf` against llama.cpp | prompts with identical greedy ids | greedy tokens agreeing "
          "| max abs logit diff | max diff / logit std | bound |")
    print("|---|---|---|---|---|---|")
    for path in sorted(glob.glob(os.path.join(r, "gguf-f32-*.json"))):
        row(f"{os.path.basename(path)[9:-5]}, f32 file", prompts(os.path.basename(path)), 1e-4, True)
    for t in TYPES:
        # The types Steady holds with the file's values (every tensor of these files) agree to fp32's
        # rounding.
        exact = t in EXACT_TYPES
        row(f"llama {t}, llama.cpp on its f32 dequantization of the file", prompts(f"gguf-quant-{t}.json"),
            1e-4 if exact else 0.05, exact)
    for t in TYPES:
        # Reported, loosely bounded: both engines' dot products round the activations here (llama.cpp's
        # to 8 bits per 32 or 256, Steady's to 8 bits per 32), each its own way.
        row(f"llama {t}, llama.cpp on the same file", prompts(f"gguf-same-{t}.json"), 0.25, False)
    for path in sorted(glob.glob(os.path.join(r, "gguf-tokenize-*.json"))):
        t = json.load(open(path))
        ok = t["identical"] == t["texts"] and t["bos"]["llama_cpp_prepends"] == t["bos"]["steady_prepends"]
        bad |= not ok
        print(f"\ntokenizer {os.path.basename(path)[14:-5]}: identical ids on {t['identical']}/{t['texts']} texts; "
              f"BOS in front: llama.cpp {t['bos']['llama_cpp_prepends']}, Steady {t['bos']['steady_prepends']}"
              + ("" if ok else " FAILED"))
        for d in t["differing"][:3]:
            print("  differs:", json.dumps(d, ensure_ascii=False)[:300])
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
