#!/usr/bin/env python3
"""Each token's bytes of a Hugging Face byte-level BPE tokenizer.json (GPT-2, Qwen, Llama 3), one
hex line per id (an empty line: no bytes, as for added control tokens): the vocabulary
constrain_bench masks at real sizes (docs/benchmarks.md, "Constrained decoding").
Usage: hf_token_bytes.py TOKENIZER_JSON OUT"""
import json
import sys


def byte_decoder():
    # GPT-2's printable stand-ins for the 256 bytes (bytes_to_unicode), inverted.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def main():
    tok = json.load(open(sys.argv[1], encoding="utf-8"))
    if tok["model"]["type"] != "BPE":
        sys.exit("%s: model type %s, not BPE" % (sys.argv[1], tok["model"]["type"]))
    dec = byte_decoder()
    vocab = tok["model"]["vocab"]
    size = max(list(vocab.values()) + [t["id"] for t in tok.get("added_tokens", [])]) + 1
    lines = [""] * size
    for piece, i in vocab.items():
        try:
            lines[i] = bytes(dec[c] for c in piece).hex()
        except KeyError:
            sys.exit("%s: token %d (%r) is not byte-level" % (sys.argv[1], i, piece))
    for t in tok.get("added_tokens", []):
        lines[t["id"]] = ""  # control tokens: never allowed by a constraint
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(lines) + "\n")


main()
