#!/usr/bin/env python3
"""Line-by-line comparison of two JSON-lines answers (the reference's and Steady's).

Usage: compare_jsonl.py REFERENCE OURS INPUTS [--show N] [--any-error]
Prints "equal/total" and the first differing lines (with their input); exit 1 on any difference.
--any-error: two {"error": ...} answers are equal whatever their messages say (the renderers word
their errors differently; what must agree is that both refuse).
"""
import json
import sys


def main():
    ref_path, ours_path, inputs_path = sys.argv[1:4]
    show = int(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[4] == "--show" else 3
    any_error = "--any-error" in sys.argv[4:]
    with open(ref_path, encoding="utf-8") as f:
        ref = [json.loads(l) for l in f if l.strip()]
    with open(ours_path, encoding="utf-8") as f:
        ours = [json.loads(l) for l in f if l.strip()]
    with open(inputs_path, encoding="utf-8") as f:
        inputs = [l.rstrip("\n") for l in f if l.strip()]
    if len(ref) != len(ours):
        print(f"{len(ref)} reference answers but {len(ours)} of ours")
        return 1
    def same(a, b):
        if any_error and "error" in a and "error" in b:
            return True
        return a == b

    bad = [i for i, (a, b) in enumerate(zip(ref, ours)) if not same(a, b)]
    print(f"{len(ref) - len(bad)}/{len(ref)} equal")
    for i in bad[:show]:
        print(f"  input {inputs[i][:200]}")
        print(f"    reference {json.dumps(ref[i], ensure_ascii=False)[:400]}")
        print(f"    steady    {json.dumps(ours[i], ensure_ascii=False)[:400]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
