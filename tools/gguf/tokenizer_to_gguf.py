#!/usr/bin/python3
"""Writes a vocabulary-only GGUF file (tokenizer.ggml.model "gpt2") from a Hugging Face byte-level BPE
tokenizer.json, as llama.cpp's converter writes one: tokens by id (added tokens included), token types
(control for special added tokens, user-defined for the others, normal for the rest), the merges as
"left right" strings, tokenizer.ggml.pre naming the pre-tokenizer, BOS/EOS ids and add_bos_token from
tokenizer_config.json, and its chat template. With a `llama` architecture's hyperparameters and no
tensors: llama.cpp opens it with vocab_only, `steady tokenize --model FILE` reads its tokenizer. For
the tokenizer checks of tools/bench/peer_llamacpp.sh (docs/gguf.md).

    /usr/bin/python3 tools/gguf/tokenizer_to_gguf.py --tokenizer DIR --pre llama-bpe --out vocab.gguf
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_writer as gw  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True, help="folder of tokenizer.json (and tokenizer_config.json)")
    ap.add_argument("--pre", required=True, help="tokenizer.ggml.pre (llama.cpp's name: gpt2, llama-bpe, qwen2, ...)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    with open(os.path.join(a.tokenizer, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    config = {}
    config_path = os.path.join(a.tokenizer, "tokenizer_config.json")
    if os.path.exists(config_path):
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    model = tj["model"]
    if model.get("type") != "BPE":
        sys.exit(f"{a.tokenizer}: model type {model.get('type')!r} is not BPE")
    tokens = {i: t for t, i in model["vocab"].items()}
    types = {i: 1 for i in tokens}
    for t in tj.get("added_tokens", []):
        tokens[t["id"]] = t["content"]
        types[t["id"]] = 3 if t.get("special") else 4
    n = max(tokens) + 1
    vocab = [tokens.get(i, f"[PAD{i}]") for i in range(n)]
    kinds = [types.get(i, 5) for i in range(n)]  # 5: unused (a hole in the ids)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]

    def token_id(key):
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        return vocab.index(value) if value in vocab else None

    w = gw.GGUFWriter(a.out)
    w.add_string("general.architecture", "llama")
    w.add_string("general.name", os.path.basename(os.path.normpath(a.tokenizer)))
    for key, value in (("vocab_size", n), ("context_length", 4096), ("embedding_length", 64), ("block_count", 1),
                       ("feed_forward_length", 128), ("attention.head_count", 2), ("attention.head_count_kv", 2),
                       ("rope.dimension_count", 32)):
        w.add_uint32(f"llama.{key}", value)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", a.pre)
    w.add_array("tokenizer.ggml.tokens", gw.STRING, vocab)
    w.add_array("tokenizer.ggml.token_type", gw.INT32, kinds)
    w.add_array("tokenizer.ggml.merges", gw.STRING, merges)
    bos, eos = token_id("bos_token"), token_id("eos_token")
    if bos is not None:
        w.add_uint32("tokenizer.ggml.bos_token_id", bos)
    if eos is not None:
        w.add_uint32("tokenizer.ggml.eos_token_id", eos)
    w.add_bool("tokenizer.ggml.add_bos_token", bool(config.get("add_bos_token", bos is not None)))
    template = config.get("chat_template")
    if isinstance(template, str):
        w.add_string("tokenizer.chat_template", template)
    w.write()
    print(f"{a.out}: {n} tokens, {len(merges)} merges, pre {a.pre}", file=sys.stderr)


if __name__ == "__main__":
    main()
