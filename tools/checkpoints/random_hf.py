#!/usr/bin/python3
"""Writes a checkpoint of random weights in the Hugging Face layout, as transformers' save_pretrained
writes one: config.json, generation_config.json, model.safetensors or shards with
model.safetensors.index.json. For the suite (small shapes), benchmarks (llama1b) and the exactness
check against llama.cpp (tools/bench/peer_llamacpp.sh exact). numpy only (Debian's python3-numpy).

    /usr/bin/python3 tools/checkpoints/random_hf.py --arch qwen2 --out /tmp/q2 [--size small|llama1b]
        [--dtype f32|bf16|f16] [--shards N] [--seed S] [--rope-scaling llama3|linear|dynamic|yarn]
        [--sliding-window W] [--tie] [--layers N] [--vocab N] [--no-generation-config]

--arch llama | mistral | qwen2 | qwen3. Per architecture, what its Hugging Face config implies:
qwen2 has q/k/v biases (and llama.cpp's assumption head_dim = hidden / heads); qwen3 has per-head
q/k RMSNorm and a head_dim other than hidden / heads in the small shape; mistral gets sliding_window
only when asked (--sliding-window); qwen2/qwen3 with --sliding-window set use_sliding_window and
max_window_layers (the upper half of the layers slide). --rope-scaling adds Llama 3.1's (or another
type's) rope_scaling; llama3 comes with rope_theta 500000 as Llama 3 has.

The values: matrices normal with standard deviation 1/sqrt(fan-in), the embedding 1, the LM head
4/sqrt(hidden) (peaked logits, so that greedy choices are not near ties), norms uniform in [0.8, 1.2],
biases uniform in [-0.2, 0.2]; one numpy generator per tensor (seed, tensor index), so the values do
not depend on the dtype or the sharding: the same seed in f32 and in bf16 gives the same weights up
to bf16's rounding. Tensors are written one at a time (a llama1b-sized checkpoint needs no more
memory than its largest tensor).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

SHAPES = {
    # vocab, hidden, intermediate, layers, heads, kv heads, head_dim (None: hidden / heads)
    "small": dict(vocab=512, hidden=128, inter=384, layers=4, heads=8, kv=4, head_dim=None),
    # every matrix's rows whole 256-value blocks, so that llama.cpp's K-quants need no fallback type
    "quant": dict(vocab=512, hidden=256, inter=512, layers=2, heads=4, kv=2, head_dim=None),
    "llama1b": dict(vocab=32000, hidden=2048, inter=5632, layers=16, heads=32, kv=8, head_dim=None),
}
ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "qwen3": "Qwen3ForCausalLM"}
DTYPES = {"f32": ("F32", 4, "float32"), "bf16": ("BF16", 2, "bfloat16"), "f16": ("F16", 2, "float16")}


def config_for(a):
    s = dict(SHAPES[a.size])
    if a.layers:
        s["layers"] = a.layers
    if a.vocab:
        s["vocab"] = a.vocab
    if a.arch == "qwen3" and a.size == "small":
        s["head_dim"] = 32  # Qwen3's heads are wider than hidden / heads (0.6B: 1024 / 16 = 64, head_dim 128)
    c = {
        "architectures": [ARCHITECTURES[a.arch]],
        "model_type": a.arch,
        "vocab_size": s["vocab"],
        "hidden_size": s["hidden"],
        "intermediate_size": s["inter"],
        "num_hidden_layers": s["layers"],
        "num_attention_heads": s["heads"],
        "num_key_value_heads": s["kv"],
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5 if a.arch in ("llama", "mistral") else 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": a.tie,
        "torch_dtype": DTYPES[a.dtype][2],
        "bos_token_id": 1,
        "eos_token_id": 2,
        "initializer_range": 0.02,
        "use_cache": True,
    }
    if s["head_dim"]:
        c["head_dim"] = s["head_dim"]
    if a.arch == "llama":
        c.update(attention_bias=a.attention_bias, mlp_bias=a.mlp_bias, pretraining_tp=1)
    if a.arch == "mistral":
        c["sliding_window"] = a.sliding_window  # None unless asked: Mistral v0.2 and later have none
    if a.arch in ("qwen2", "qwen3"):
        c.update(use_sliding_window=a.sliding_window is not None, sliding_window=a.sliding_window or 4096,
                 max_window_layers=s["layers"] // 2, attention_dropout=0.0)
        if a.arch == "qwen3":
            c["attention_bias"] = False
    if a.rope_scaling == "llama3":
        c["rope_theta"] = 500000.0
        c["max_position_embeddings"] = 131072
        c["rope_scaling"] = {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                             "original_max_position_embeddings": 8192, "rope_type": "llama3"}
    elif a.rope_scaling == "linear":
        c["rope_scaling"] = {"type": "linear", "factor": 4.0}
    elif a.rope_scaling == "dynamic":
        c["max_position_embeddings"] = 64  # the scaling starts past 64 tokens, so a short test sees it
        c["rope_scaling"] = {"type": "dynamic", "factor": 2.0}
    elif a.rope_scaling == "yarn":
        c["rope_scaling"] = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}
    return c


def tensors_for(c):
    """(name, shape, kind) in the order save_pretrained's state dict has them."""
    hidden, inter = c["hidden_size"], c["intermediate_size"]
    hd = c.get("head_dim") or hidden // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    qkv_bias = c["model_type"] == "qwen2" or (c["model_type"] in ("llama", "qwen3") and c.get("attention_bias"))
    out = [("model.embed_tokens.weight", (c["vocab_size"], hidden), "embedding")]
    for n in range(c["num_hidden_layers"]):
        p = f"model.layers.{n}."
        out += [(p + "self_attn.q_proj.weight", (q, hidden), "matrix"),
                (p + "self_attn.k_proj.weight", (kv, hidden), "matrix"),
                (p + "self_attn.v_proj.weight", (kv, hidden), "matrix"),
                (p + "self_attn.o_proj.weight", (hidden, q), "matrix")]
        if qkv_bias:
            out += [(p + "self_attn.q_proj.bias", (q,), "bias"), (p + "self_attn.k_proj.bias", (kv,), "bias"),
                    (p + "self_attn.v_proj.bias", (kv,), "bias")]
        if c["model_type"] in ("llama", "qwen3") and c.get("attention_bias"):
            out.append((p + "self_attn.o_proj.bias", (hidden,), "bias"))
        if c["model_type"] == "qwen3":
            out += [(p + "self_attn.q_norm.weight", (hd,), "norm"), (p + "self_attn.k_norm.weight", (hd,), "norm")]
        out += [(p + "mlp.gate_proj.weight", (inter, hidden), "matrix"),
                (p + "mlp.up_proj.weight", (inter, hidden), "matrix"),
                (p + "mlp.down_proj.weight", (hidden, inter), "matrix")]
        if c.get("mlp_bias"):
            out += [(p + "mlp.gate_proj.bias", (inter,), "bias"), (p + "mlp.up_proj.bias", (inter,), "bias"),
                    (p + "mlp.down_proj.bias", (hidden,), "bias")]
        out += [(p + "input_layernorm.weight", (hidden,), "norm"),
                (p + "post_attention_layernorm.weight", (hidden,), "norm")]
    out.append(("model.norm.weight", (hidden,), "norm"))
    if not c["tie_word_embeddings"]:
        out.append(("lm_head.weight", (c["vocab_size"], hidden), "head"))
    return out


def values(name, shape, kind, index, seed):
    rng = np.random.default_rng([seed, index])
    if kind == "norm":
        return rng.uniform(0.8, 1.2, shape).astype(np.float32)
    if kind == "bias":
        return rng.uniform(-0.2, 0.2, shape).astype(np.float32)
    std = {"embedding": 1.0, "head": 4.0 / np.sqrt(shape[1]), "matrix": 1.0 / np.sqrt(shape[1])}[kind]
    return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)


def encode(x, dtype):
    if dtype == "f32":
        return x.astype("<f4").tobytes()
    if dtype == "f16":
        return x.astype("<f2").tobytes()
    bits = x.view(np.uint32)  # bf16: round to nearest even (no NaN here)
    return ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype("<u2").tobytes()


def write_safetensors(path, entries, dtype, seed):
    """entries: [(index, name, shape, kind)]. The header as the safetensors library writes it: keys
    in order, padded with spaces to a multiple of 8 bytes."""
    st_dtype, size, _ = DTYPES[dtype]
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for _, name, shape, _ in entries:
        n = int(np.prod(shape)) * size
        header[name] = {"dtype": st_dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for index, name, shape, kind in entries:
            f.write(encode(values(name, shape, kind, index, seed), dtype))
    os.replace(tmp, path)
    return offset


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", required=True, choices=sorted(ARCHITECTURES))
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", default="small", choices=sorted(SHAPES))
    ap.add_argument("--dtype", default="f32", choices=sorted(DTYPES))
    ap.add_argument("--shards", type=int, default=1, help="files to split the tensors over (>1: with an index)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--layers", type=int, help="number of layers (default: the size's)")
    ap.add_argument("--vocab", type=int, help="vocab_size (default: the size's), e.g. a real tokenizer's")
    ap.add_argument("--rope-scaling", choices=["llama3", "linear", "dynamic", "yarn"])
    ap.add_argument("--sliding-window", type=int, help="mistral: every layer; qwen2/qwen3: the upper half")
    ap.add_argument("--attention-bias", action="store_true", help="llama: attention_bias (q, k, v, o biases)")
    ap.add_argument("--mlp-bias", action="store_true", help="llama: mlp_bias (gate, up, down biases)")
    ap.add_argument("--tie", action="store_true", help="tie_word_embeddings")
    ap.add_argument("--no-generation-config", action="store_true")
    a = ap.parse_args()

    c = config_for(a)
    tensors = [(i, *t) for i, t in enumerate(tensors_for(c))]
    os.makedirs(a.out, exist_ok=True)
    if a.shards <= 1:
        total = write_safetensors(os.path.join(a.out, "model.safetensors"), tensors, a.dtype, a.seed)
    else:
        # Contiguous runs of tensors of about equal bytes, as save_pretrained's max_shard_size does.
        size = DTYPES[a.dtype][1]
        sizes = [int(np.prod(t[2])) * size for t in tensors]
        budget, groups, current, acc = sum(sizes) / a.shards, [], [], 0
        for t, n in zip(tensors, sizes):
            if current and acc + n > budget * (len(groups) + 1) and len(groups) < a.shards - 1:
                groups.append(current)
                current = []
            current.append(t)
            acc += n
        groups.append(current)
        weight_map, total = {}, 0
        for k, group in enumerate(groups):
            name = f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors"
            total += write_safetensors(os.path.join(a.out, name), group, a.dtype, a.seed)
            weight_map.update({t[1]: name for t in group})
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    if not a.no_generation_config:
        with open(os.path.join(a.out, "generation_config.json"), "w") as f:
            json.dump({"bos_token_id": 1, "eos_token_id": 2, "do_sample": True, "temperature": 0.6, "top_p": 0.9,
                       "_from_model_config": True}, f, indent=2)
    print(f"{a.out}: {a.arch} {a.size} {a.dtype}, {len(tensors)} tensors, {total} bytes of weights"
          f"{f' in {a.shards} shards' if a.shards > 1 else ''}", file=sys.stderr)


if __name__ == "__main__":
    main()
