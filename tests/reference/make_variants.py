#!/usr/bin/env python3
"""Variants of the real tokenizers that exercise what they leave unused, for the comparison with the
JS reference (tests/cli/hf_tokenizers.sh): Metaspace pre-tokenization with prepend_scheme "first"
(Mistral v0.3 and newer Llama 2 conversions), added tokens with lstrip/rstrip, normalized added tokens,
NFKC + Lowercase + a Replace regex normalizer.

Usage: make_variants.py MODELS_DIR   (reads MODELS_DIR/{llama2,llama3_1,qwen3}, writes MODELS_DIR/<variant>)
"""
import json
import os
import sys


def load(models, name):
    with open(os.path.join(models, name, "tokenizer.json"), encoding="utf-8") as f:
        tokenizer = json.load(f)
    config_path = os.path.join(models, name, "tokenizer_config.json")
    config = {}
    if os.path.exists(config_path):
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    return tokenizer, config


def save(models, name, tokenizer, config):
    os.makedirs(os.path.join(models, name), exist_ok=True)
    with open(os.path.join(models, name, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    with open(os.path.join(models, name, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False)


def added(tokenizer, content, **flags):
    for a in tokenizer["added_tokens"]:
        if a["content"] == content:
            a.update(flags)
            return
    next_id = max(max(tokenizer["model"]["vocab"].values()), max(a["id"] for a in tokenizer["added_tokens"])) + 1
    entry = {"id": next_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": False}
    entry.update(flags)
    tokenizer["added_tokens"].append(entry)


def main():
    models = sys.argv[1]
    space = "\u2581"

    t, c = load(models, "llama2")
    t["normalizer"] = None
    t["pre_tokenizer"] = {"type": "Metaspace", "replacement": space, "prepend_scheme": "first", "split": False}
    t["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Metaspace", "replacement": space, "prepend_scheme": "first", "split": False},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}
    added(t, "</s>", lstrip=True, rstrip=True)
    added(t, "<sep>", rstrip=True)
    save(models, "llama2_metaspace", t, c)

    t, c = load(models, "llama3_1")
    added(t, "<|eot_id|>", lstrip=True, rstrip=True)
    added(t, "<|start_header_id|>", lstrip=True)
    added(t, "Hello", normalized=True)  # a normalized token without a normalizer: matched as written
    save(models, "llama3_1_strip", t, c)

    t, c = load(models, "qwen3")
    t["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "NFKC"}, {"type": "Lowercase"},
        {"type": "Replace", "pattern": {"Regex": "[ \\t]{2,}"}, "content": " "}]}
    added(t, "<tool_call>", normalized=True, lstrip=True)
    added(t, "<think>", normalized=True)
    save(models, "qwen3_nfkc", t, c)


if __name__ == "__main__":
    main()
