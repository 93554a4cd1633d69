#!/usr/bin/env python3
"""Line-by-line comparison of two JSON-lines answers (the reference's and Steady's).

Usage: compare_jsonl.py REFERENCE OURS INPUTS [--show N] [--any-error] [--or SECOND]
Prints "equal/total" and the first differing lines (with their input); exit 1 on any difference.
--any-error: two {"error": ...} answers are equal whatever their messages say (the renderers word
their errors differently; what must agree is that both refuse).
--or SECOND: a second reference's answers (transformers' Jinja2 beside @huggingface/jinja). Where the
two references disagree, Steady's answer may equal either; such lines are counted and listed apart.
"""
import argparse
import json
import sys


def read_lines(path, parse=True):
    with open(path, encoding="utf-8") as f:
        return [json.loads(l) if parse else l.rstrip("\n") for l in f if l.strip()]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("reference")
    parser.add_argument("ours")
    parser.add_argument("inputs")
    parser.add_argument("--show", type=int, default=3)
    parser.add_argument("--any-error", action="store_true")
    parser.add_argument("--or", dest="second")
    args = parser.parse_args()
    ref, ours = read_lines(args.reference), read_lines(args.ours)
    inputs = read_lines(args.inputs, parse=False)
    second = read_lines(args.second) if args.second else None
    if len(ref) != len(ours) or (second is not None and len(second) != len(ref)):
        print(f"{len(ref)} reference answers but {len(ours)} of ours"
              + (f" and {len(second)} of the second reference" if second is not None else ""))
        return 1

    def same(a, b):
        if args.any_error and "error" in a and "error" in b:
            return True
        return a == b

    bad, second_only = [], []
    for i, (a, b) in enumerate(zip(ref, ours)):
        if same(a, b):
            continue
        if second is not None and not same(a, second[i]) and same(second[i], b):
            second_only.append(i)
        else:
            bad.append(i)
    line = f"{len(ref) - len(bad)}/{len(ref)} equal"
    if second is not None:
        line += f", {len(second_only)} of them where the references differ and Steady gives the second's"
    print(line)
    for i in second_only:
        print(f"  references differ on input {inputs[i][-160:]}")
        print(f"    reference {json.dumps(ref[i], ensure_ascii=False)[:200]}")
        print(f"    second    {json.dumps(second[i], ensure_ascii=False)[:200]}")
    for i in bad[:args.show]:
        print(f"  input {inputs[i][:200]}")
        print(f"    reference {json.dumps(ref[i], ensure_ascii=False)[:400]}")
        if second is not None:
            print(f"    second    {json.dumps(second[i], ensure_ascii=False)[:400]}")
        print(f"    steady    {json.dumps(ours[i], ensure_ascii=False)[:400]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
