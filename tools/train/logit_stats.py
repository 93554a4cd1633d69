#!/usr/bin/env python3
"""Distribution of a softmax checkpoint's attention logits x = s q.k over causal (query, key) pairs on
validation text: the figure behind docs/models.md's Taylor P=4 explanation (the cubic Taylor weight
1 + x + x^2/2 + x^3/6 is negative below x = -1.596).

    /usr/bin/python3 tools/train/logit_stats.py --model models/tiny-softmax --data corpus-data/valid.txt
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export  # noqa: E402
from data import Tokenizer, eval_batches, token_stream  # noqa: E402
from model import SteadyLM  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--seq-len", type=int, default=256)
    args = ap.parse_args()
    torch.set_num_threads(1)
    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    model = SteadyLM(cfg)
    tensors, _ = export.read_safetensors(os.path.join(args.model, "model.safetensors"))
    model.load_state_dict({k: v.float() for k, v in tensors.items()}, strict=False)
    model.eval()
    logits = []
    for layer in model.model.layers:
        mech = layer.self_attn.mechanism
        if not hasattr(mech, "scale") or mech.tensors is not None:
            sys.exit("logit_stats: %s is not a softmax checkpoint" % args.model)
        forward = mech.forward

        def record(q, k, v, mech=mech, forward=forward):
            k_all = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
            x = mech.scale * q @ k_all.transpose(-1, -2)
            mask = torch.ones(x.shape[-1], x.shape[-1], dtype=torch.bool).tril()
            logits.append(x[..., mask].flatten())
            return forward(q, k, v)
        mech.forward = record
    tok = Tokenizer(os.path.join(args.model, "tokenizer.model"))
    stream = token_stream(args.data, tok, None)
    with torch.no_grad():
        for x, _ in eval_batches(stream, 8, args.seq_len, tok.bos_id, args.tokens):
            model(x)
    x = torch.cat(logits)
    print("causal pairs %d over %d layers, x from %.2f to %.2f" % (x.numel(), len(model.model.layers), x.min(), x.max()))
    for threshold in (-1.0, -1.596, -2.0, -2.5):
        print("x < %6.3f: %.4f" % (threshold, (x < threshold).float().mean()))


if __name__ == "__main__":
    main()
