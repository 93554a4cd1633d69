#!/usr/bin/python3
"""Small GGUF models for the mapping's error checks of tests/cli/gguf_llamacpp.sh: a well-formed
`llama` file (one layer, random f32 weights, no vocabulary) and copies each damaged in one way the
loader must name: a tensor missing, a tensor of the wrong shape, an architecture Steady does not
compute, a tensor no layer uses, a required key missing.

  bad_models.py OUT_DIR   # writes good.gguf, missing.gguf, shape.gguf, arch.gguf, extra.gguf, key.gguf
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "tools", "gguf"))
import gguf_writer as gw  # noqa: E402

HIDDEN, HEADS, FF, VOCAB = 64, 2, 128, 64


def write(path, arch="llama", drop_tensor=None, drop_key=None, reshape=None, extra=None):
    rng = np.random.default_rng(1)
    w = gw.GGUFWriter(path)
    w.add_string("general.architecture", arch)
    keys = {"context_length": 256, "embedding_length": HIDDEN, "block_count": 1, "feed_forward_length": FF,
            "attention.head_count": HEADS, "attention.head_count_kv": HEADS}
    for key, value in keys.items():
        if key != drop_key:
            w.add_uint32(f"{arch}.{key}", value)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    shapes = {"token_embd.weight": (VOCAB, HIDDEN), "blk.0.attn_norm.weight": (HIDDEN,),
              "blk.0.attn_q.weight": (HIDDEN, HIDDEN), "blk.0.attn_k.weight": (HIDDEN, HIDDEN),
              "blk.0.attn_v.weight": (HIDDEN, HIDDEN), "blk.0.attn_output.weight": (HIDDEN, HIDDEN),
              "blk.0.ffn_norm.weight": (HIDDEN,), "blk.0.ffn_gate.weight": (FF, HIDDEN),
              "blk.0.ffn_up.weight": (FF, HIDDEN), "blk.0.ffn_down.weight": (HIDDEN, FF),
              "output_norm.weight": (HIDDEN,), "output.weight": (VOCAB, HIDDEN)}
    if reshape:
        shapes[reshape[0]] = reshape[1]
    if extra:
        shapes[extra] = (HIDDEN,)
    for name, shape in shapes.items():
        if name == drop_tensor:
            continue
        values = (rng.standard_normal(shape) * 0.1).astype(np.float32)
        w.add_tensor(name, shape, gw.GGML_F32, lambda v=values: v)
    w.write()


def main():
    out = sys.argv[1]
    write(os.path.join(out, "good.gguf"))
    write(os.path.join(out, "missing.gguf"), drop_tensor="blk.0.ffn_up.weight")
    write(os.path.join(out, "shape.gguf"), reshape=("blk.0.attn_k.weight", (HIDDEN // 2, HIDDEN)))
    write(os.path.join(out, "arch.gguf"), arch="gemma2")
    write(os.path.join(out, "extra.gguf"), extra="blk.0.mystery.weight")
    write(os.path.join(out, "key.gguf"), drop_key="block_count")


if __name__ == "__main__":
    main()
