"""Validation loss of an exported checkpoint, optionally served with another mechanism (as the engine's
--mechanism flag does: the logit scale is kept, the rest comes from the override).

  /usr/bin/python3 tools/train/evaluate.py --model models/small-softmax --data corpus-data/valid.txt
  /usr/bin/python3 tools/train/evaluate.py --model models/small-softmax --data corpus-data/valid.txt \\
      --mechanism taylor --order 3

Prints one JSON object: mechanism, tokens, loss (nats/token), perplexity. Windows of --seq-len tokens,
each started with BOS from an empty state, the first --max-tokens targets of the stream.
"""
import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data import Tokenizer, eval_batches, token_stream  # noqa: E402
from export import load_checkpoint  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--mechanism", help="serve with this mechanism instead (e.g. taylor)")
    ap.add_argument("--order", type=int, help="taylor: number of terms P")
    ap.add_argument("--param", action="append", default=[], help="key=value mechanism parameter (JSON value)")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=65536)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache-dir")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    override = None
    if args.mechanism:
        override = {"mechanism": args.mechanism}
        if args.order:
            override["order"] = args.order
        for kv in args.param:
            key, value = kv.split("=", 1)
            try:
                override[key] = json.loads(value)
            except ValueError:
                override[key] = value
    model = load_checkpoint(args.model, override=override)
    tok = Tokenizer(os.path.join(args.model, "tokenizer.model"))
    stream = token_stream(args.data, tok, args.cache_dir)
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in eval_batches(stream, args.batch_size, min(args.seq_len, len(stream) - 1), tok.bos_id,
                                 args.max_tokens):
            logits = model(x)
            total += torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                                       reduction="sum").item()
            count += y.numel()
    loss = total / count
    print(json.dumps({"model": args.model, "mechanism": model.cfg["attention"], "tokens": count,
                      "loss": round(loss, 5), "perplexity": round(math.exp(loss), 3)}))


if __name__ == "__main__":
    main()
