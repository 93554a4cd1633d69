#!/usr/bin/python3
"""Writes a copy of a QK-norm checkpoint with the QK-norm taken out (`qk_norm: false`, the
q_norm/k_norm tensors dropped), so that the trained weights of models/tiny-softmax also exercise
llama.cpp's `llama` architecture and the RoPE row permutation of steady_to_gguf.py (a randomly
initialised checkpoint gives near-uniform logits, a weak check). The result is a different model
than the original, of course; both engines must still agree on it.

    /usr/bin/python3 tools/gguf/without_qk_norm.py --model models/tiny-softmax --out /tmp/tiny-llama
"""
import argparse
import json
import os
import shutil
import struct


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    with open(os.path.join(a.model, "config.json")) as f:
        config = json.load(f)
    config["qk_norm"] = False
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    shutil.copyfile(os.path.join(a.model, "tokenizer.model"), os.path.join(a.out, "tokenizer.model"))

    with open(os.path.join(a.model, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", None)
    kept, blobs, offset = {}, [], 0
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        if name.endswith("self_attn.q_norm.weight") or name.endswith("self_attn.k_norm.weight"):
            continue
        begin, end = e["data_offsets"]
        kept[name] = {"dtype": e["dtype"], "shape": e["shape"], "data_offsets": [offset, offset + end - begin]}
        blobs.append(data[begin:end])
        offset += end - begin
    if meta is not None:
        kept = {"__metadata__": meta, **kept}
    head = json.dumps(kept, separators=(",", ":")).encode()
    head += b" " * ((-len(head)) % 8)  # data 8-byte aligned, as Steady writes it
    with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for b in blobs:
            f.write(b)


if __name__ == "__main__":
    main()
