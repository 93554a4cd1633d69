#!/usr/bin/python3
"""A reference forward pass in PyTorch (Debian's python3-torch, CPU) of a Hugging Face checkpoint
directory of model_type llama, mistral, qwen2 or qwen3, written from transformers' modeling code
(modeling_llama / mistral / qwen2 / qwen3 and modeling_rope_utils) and sharing nothing with Steady's
C++: its own safetensors reader, its own RoPE frequencies, a plain masked softmax attention. Computes
in float64, so what it is compared against carries the error.

    /usr/bin/python3 tools/checkpoints/torch_reference.py --model DIR --prompt-ids 1,5,9 [--max-tokens N]

Prints one JSON line: {"ids": the greedy continuation of --max-tokens ids (eos does not stop it),
"logits": the logits after the prompt}. The prompt is used as given (no BOS is added).

RoPE: default, linear, llama3, yarn, and dynamic NTK as Hugging Face's cached generation applies it
token by token (each token rotated with the base its own sequence length gives, kept in the cache);
the sliding window lets position i see j with i - W < j <= i, on the layers the config names
(mistral: all; qwen2/qwen3 with use_sliding_window: layer_types, else those from max_window_layers).
"""
import argparse
import json
import math
import os
import struct

import numpy as np
import torch

DT = torch.float64


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = np.frombuffer(data[b:e], dtype={"F32": "<f4", "F16": "<f2", "BF16": "<u2", "F64": "<f8"}[info["dtype"]])
        if info["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        out[name] = torch.from_numpy(raw.astype(np.float64).reshape(info["shape"]))
    return out


def read_weights(d):
    index = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(d, "model.safetensors"))
    w = {}
    for shard in sorted(set(json.load(open(index))["weight_map"].values())):
        w.update(read_safetensors(os.path.join(d, shard)))
    return w


def inv_freq_for(c, dim, seq_len):
    """(inv_freq, attention scale) as modeling_rope_utils computes them for a sequence of seq_len."""
    base = c.get("rope_theta", 10000.0)
    rs = c.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=DT) / dim)
    inv = 1.0 / pos_freqs
    if kind == "default":
        return inv, 1.0
    factor = rs["factor"]
    if kind == "linear":
        return inv / factor, 1.0
    if kind == "dynamic":
        max_pos = c["max_position_embeddings"]
        if seq_len <= max_pos:
            return inv, 1.0
        base = base * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2))
        return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=DT) / dim)), 1.0
    if kind == "llama3":
        old = rs["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / rs["low_freq_factor"], old / rs["high_freq_factor"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old / wavelen - rs["low_freq_factor"]) / (rs["high_freq_factor"] - rs["low_freq_factor"])
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return torch.where(medium, smoothed, scaled), 1.0
    if kind == "yarn":
        orig = rs.get("original_max_position_embeddings") or c["max_position_embeddings"]
        mscale = lambda s, m=1.0: 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0  # noqa: E731
        att = rs.get("attention_factor")
        if att is None:
            att = (mscale(factor, rs["mscale"]) / mscale(factor, rs["mscale_all_dim"])
                   if rs.get("mscale") and rs.get("mscale_all_dim") else mscale(factor))
        beta_fast, beta_slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1

        def corr_dim(rot):
            return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))
        low, high = corr_dim(beta_fast), corr_dim(beta_slow)
        if rs.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=DT) - low) / (high - low), 0, 1)
        extrapolation = 1 - ramp
        return (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation, att
    raise SystemExit(f"rope type {kind} not in this reference")


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rms(x, w, eps):
    return w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def windows(c):
    t, n = c["model_type"], c["num_hidden_layers"]
    if t == "mistral":
        return [c.get("sliding_window")] * n
    if t in ("qwen2", "qwen3") and c.get("use_sliding_window") and c.get("sliding_window"):
        types = c.get("layer_types") or ["sliding_attention" if i >= c.get("max_window_layers", 28)
                                         else "full_attention" for i in range(n)]
        return [c["sliding_window"] if x == "sliding_attention" else None for x in types]
    return [None] * n


def forward(c, w, ids):
    """Logits [T, vocab] of the whole sequence `ids` (positions 0..T-1)."""
    t = c["model_type"]
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or c["hidden_size"] // heads
    eps = c["rms_norm_eps"]
    T = len(ids)
    pos = torch.arange(T, dtype=DT)
    kind = (c.get("rope_scaling") or {}).get("rope_type", (c.get("rope_scaling") or {}).get("type"))
    if kind == "dynamic":  # each position with the frequencies of the sequence ending at it
        rows = [inv_freq_for(c, hd, p + 1)[0] for p in range(T)]
        freqs, att = torch.stack(rows) * pos[:, None], 1.0
    else:
        inv, att = inv_freq_for(c, hd, T)
        freqs = pos[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos() * att, emb.sin() * att
    win = windows(c)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    for n in range(c["num_hidden_layers"]):
        p = f"model.layers.{n}."

        def lin(name, v):
            y = v @ w[p + name + ".weight"].T
            return y + w[p + name + ".bias"] if p + name + ".bias" in w else y
        h = rms(x, w[p + "input_layernorm.weight"], eps)
        q = lin("self_attn.q_proj", h).view(T, heads, hd)
        k = lin("self_attn.k_proj", h).view(T, kv, hd)
        v = lin("self_attn.v_proj", h).view(T, kv, hd)
        if t == "qwen3":
            q = rms(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms(k, w[p + "self_attn.k_norm.weight"], eps)
        q = q * cos[:, None, :] + rotate_half(q) * sin[:, None, :]
        k = k * cos[:, None, :] + rotate_half(k) * sin[:, None, :]
        k = k.repeat_interleave(heads // kv, dim=1)
        v = v.repeat_interleave(heads // kv, dim=1)
        scores = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(hd)
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        allowed = j <= i
        if win[n]:
            allowed &= j > i - win[n]
        scores = scores.masked_fill(~allowed, float("-inf"))
        o = torch.einsum("hij,jhd->ihd", torch.softmax(scores, dim=-1), v).reshape(T, heads * hd)
        x = x + lin("self_attn.o_proj", o)
        h = rms(x, w[p + "post_attention_layernorm.weight"], eps)
        g = lin("mlp.gate_proj", h)
        x = x + lin("mlp.down_proj", torch.nn.functional.silu(g) * lin("mlp.up_proj", h))
    x = rms(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if c.get("tie_word_embeddings") else w["lm_head.weight"]
    return x @ head.T


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-ids", required=True)
    ap.add_argument("--max-tokens", type=int, default=0)
    a = ap.parse_args()
    c = json.load(open(os.path.join(a.model, "config.json")))
    c.setdefault("model_type", "llama")
    w = read_weights(a.model)
    ids = [int(x) for x in a.prompt_ids.split(",")]
    torch.set_num_threads(1)
    logits = forward(c, w, ids)[-1]
    first = logits.clone()
    out = []
    for _ in range(a.max_tokens):  # the whole sequence again each step: slow, plain, no cache
        nxt = int(torch.argmax(logits))  # the first maximum, as Steady's greedy choice
        out.append(nxt)
        ids.append(nxt)
        if len(out) < a.max_tokens:
            logits = forward(c, w, ids)[-1]
    print(json.dumps({"ids": out, "logits": first.tolist()}))


if __name__ == "__main__":
    main()
