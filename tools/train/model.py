"""The engine's architecture in PyTorch: a pre-norm Llama decoder (RMSNorm, optional per-head QK-norm,
RoPE in the rotate_half layout, SwiGLU MLP, no biases) with a pluggable attention mechanism.

Module names follow the Hugging Face Llama layout, so state_dict() names are the checkpoint's tensor
names (model.layers.N.self_attn.q_proj.weight, ..., self_attn.slay.anchors, self_attn.dark.M).
The model is built from a config.json dict (docs/checkpoint-format.md).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from mechanisms import make_mechanism


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * w, in fp32 (and fp64 when the input is fp64)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        xf = x.to(dtype)
        y = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + self.eps) * self.weight.to(dtype)
        return y.to(x.dtype)


def rope_tables(head_dim, theta, positions):
    """cos, sin [T, head_dim/2] in fp64. inv_freq is rounded to fp32 and the angle formed in fp64, as
    the engine does (kernels/cpu/ops.cc: Rope)."""
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    inv_freq = torch.pow(torch.tensor(theta, dtype=torch.float64), -2.0 * i / head_dim).float().double()
    angle = positions.double()[:, None] * inv_freq.to(positions.device)[None, :]
    return angle.cos(), angle.sin()


def apply_rope(x, cos, sin):
    """x [B, H, T, d]; pairs (i, i + d/2) rotated by angle[t, i] (HF rotate_half)."""
    half = x.shape[-1] // 2
    c, s = cos.to(x.dtype), sin.to(x.dtype)
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg, layer, seed, dark_mode):
        super().__init__()
        self.heads = cfg["num_attention_heads"]
        self.kv_heads = cfg["num_key_value_heads"]
        self.head_dim = cfg["head_dim"]
        hidden = cfg["hidden_size"]
        self.q_proj = nn.Linear(hidden, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, hidden, bias=False)
        if cfg.get("qk_norm", False):
            self.q_norm = RMSNorm(self.head_dim, cfg["rms_norm_eps"])
            self.k_norm = RMSNorm(self.head_dim, cfg["rms_norm_eps"])
        else:
            self.q_norm = self.k_norm = None
        attention = layer_attention(cfg, layer)
        name = attention.pop("mechanism")
        if dark_mode and name == "dark":  # "performer" (M frozen at I) or "lfk" (G learned)
            name = dark_mode
        # Per-layer seed for the fixed random tensors: layers draw different features.
        self.mechanism = make_mechanism(name, self.head_dim, self.kv_heads, attention, seed * 1000003 + layer,
                                        heads=self.heads)
        if self.mechanism.tensors is not None:
            self.add_module(self.mechanism.tensor_name, self.mechanism.tensors)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)  # per head, before RoPE
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if cos is not None:
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = self.mechanism(q, k, v)  # [B, H, T, d]
        return self.o_proj(y.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg, layer, seed, dark_mode):
        super().__init__()
        eps = cfg["rms_norm_eps"]
        self.input_layernorm = RMSNorm(cfg["hidden_size"], eps)
        self.self_attn = Attention(cfg, layer, seed, dark_mode)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], eps)
        self.mlp = MLP(cfg["hidden_size"], cfg["intermediate_size"])

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, cfg, seed, dark_mode):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(DecoderLayer(cfg, i, seed, dark_mode) for i in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class SteadyLM(nn.Module):
    """Token ids [B, T] (BOS first, at position 0) -> logits [B, T, vocab].

    cfg is the config.json dict. `seed` draws the fixed random tensors of slay/dark (loading a checkpoint
    overwrites them); `performer` trains dark with M frozen at the identity; `dark_mode` "lfk" trains
    dark's projections G instead (M frozen at I: DARKFormer's learned-feature-kernel baseline)."""

    def __init__(self, cfg, seed=0, performer=False, dark_mode=None):
        super().__init__()
        self.cfg = cfg
        self.model = Decoder(cfg, seed, dark_mode or ("performer" if performer else None))
        self.tied = cfg.get("tie_word_embeddings", False)
        self.lm_head = None if self.tied else nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)

    def init_weights(self, seed):
        """N(0, 0.02) for matrices and embeddings, residual outputs scaled by 1/sqrt(2 layers); norms 1."""
        g = torch.Generator().manual_seed(seed)
        std = 0.02
        out_std = std / math.sqrt(2 * self.cfg["num_hidden_layers"])
        for name, p in self.named_parameters():
            if name.endswith("norm.weight") or ".dark." in name or ".sliced." in name:  # own init
                continue
            s = out_std if name.endswith(("o_proj.weight", "down_proj.weight")) else std
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) * s)

    def hidden(self, ids):
        """The decoder layers' output [B, T, hidden], before the final norm."""
        cfg = self.cfg
        x = self.model.embed_tokens(ids)
        cos = sin = None
        if cfg.get("rope_theta"):
            cos, sin = rope_tables(cfg["head_dim"], cfg["rope_theta"], torch.arange(ids.shape[1], device=ids.device))
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return x

    def forward(self, ids):
        x = self.model.norm(self.hidden(ids))
        weight = self.model.embed_tokens.weight if self.tied else self.lm_head.weight
        return F.linear(x, weight)

    def checkpoint_tensors(self):
        """name -> tensor, exactly the checkpoint's tensors (lm_head absent when tied)."""
        return {k: v for k, v in self.state_dict().items() if not (self.tied and k == "lm_head.weight")}


def expected_tensors(cfg):
    """name -> shape of every tensor a checkpoint with this config.json must hold, written from the
    engine's format description (not from the PyTorch modules), for tests."""
    h, d, inter, v = cfg["hidden_size"], cfg["head_dim"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    out = {"model.embed_tokens.weight": [v, h], "model.norm.weight": [h]}
    if not cfg.get("tie_word_embeddings", False):
        out["lm_head.weight"] = [v, h]
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        att = layer_attention(cfg, i)
        out.update({p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
                    p + "self_attn.q_proj.weight": [nh * d, h], p + "self_attn.k_proj.weight": [nkv * d, h],
                    p + "self_attn.v_proj.weight": [nkv * d, h], p + "self_attn.o_proj.weight": [h, nh * d],
                    p + "mlp.gate_proj.weight": [inter, h], p + "mlp.up_proj.weight": [inter, h],
                    p + "mlp.down_proj.weight": [h, inter]})
        if cfg.get("qk_norm", False):
            out[p + "self_attn.q_norm.weight"] = [d]
            out[p + "self_attn.k_norm.weight"] = [d]
        if att.get("mechanism") == "slay":
            out[p + "self_attn.slay.anchors"] = [att.get("anchors", 8), d]
            out[p + "self_attn.slay.omega"] = [att.get("nodes", 2), nkv, d, att.get("features", 16)]
        if att.get("mechanism") in ("dark", "window_dark"):
            r = att.get("rank", d)
            out[p + "self_attn.dark.M"] = [nkv, r, d]
            out[p + "self_attn.dark.G"] = [nkv, att.get("features", 256), r]
        if att.get("mechanism") == "window_dark":
            out[p + "self_attn.dark.gate"] = [nh]
        if att.get("mechanism") == "sliced_relu":
            for side, groups in (("q", nh), ("k", nkv)):
                out[p + "self_attn.sliced.%s_fc1.weight" % side] = [groups * d, groups * d]
                out[p + "self_attn.sliced.%s_fc1.bias" % side] = [groups * d]
                out[p + "self_attn.sliced.%s_fc2.weight" % side] = [groups, groups * d]
                out[p + "self_attn.sliced.%s_fc2.bias" % side] = [groups]
    return out


def layer_attention(cfg, layer):
    """The attention object of one layer: config.json's "attention" with its per-layer override
    ("layers": {"N": {...}}) applied, as the engine reads it (model/checkpoint/config.cc: a different
    "mechanism" there starts from fresh parameters, so give it its "scale"; otherwise the keys are
    added to or replace the shared ones)."""
    attention = dict(cfg.get("attention", {"mechanism": "softmax"}))
    override = attention.pop("layers", {}).get(str(layer), {})
    if "mechanism" in override and override["mechanism"] != attention.get("mechanism", "softmax"):
        attention = {}
    attention.update(override)
    attention.setdefault("mechanism", "softmax")
    return attention
