#!/usr/bin/python3
"""Converts a Steady or Hugging Face checkpoint (config.json, model.safetensors or the shards of
model.safetensors.index.json, tokenizer.model when there is one; docs/checkpoint-format.md) to a GGUF
file that llama.cpp loads, for the side-by-side of tools/bench/peer_llamacpp.sh.

    /usr/bin/python3 tools/gguf/steady_to_gguf.py --model models/tiny-softmax --out tiny.f32.gguf --type f32

--type picks the matrices' type (f32, f16, bf16, q8_0); norm vectors are always f32, as in llama.cpp's
own files. A q8_0 matrix whose rows are not whole 32-value blocks is written f16 instead (said on stderr).

Architecture, by config.json's model_type: llama and mistral (without QK-norm) become llama.cpp's
`llama`, whose RoPE rotates adjacent pairs (2i, 2i+1); Steady (like Hugging Face) rotates
(i, i + head_dim/2), so the rows of q_proj and k_proj (and their biases) are reordered within each
head to interleave the two halves, the permutation llama.cpp's converter applies to Hugging Face
Llama weights. qwen2 becomes `qwen2` (q/k/v biases, rotate-half "neox" RoPE, q/k unchanged; llama.cpp
takes head_dim = hidden / heads there, so another head_dim is refused). A checkpoint with QK-norm
(qwen3, or Steady's `qk_norm`) becomes `qwen3`: the same decoder plus a per-head RMSNorm of q and k
before RoPE, with neox RoPE. Llama 3.1's rope_scaling travels as llama.cpp's `rope_freqs.weight`
(one divisor per frequency, as llama.cpp's own converter computes them); linear scaling as
rope.scaling.type/factor. Without a tokenizer.model (random test checkpoints) the vocabulary is a
placeholder SPM one (<unk>, <s>, </s>, the 256 byte tokens, then "[T<id>]"): checks on token ids
need nothing more.

Refused: non-softmax attention (llama.cpp has only the KV cache), a `scale` other than
1/sqrt(head_dim), no `rope_theta`, rope_scaling other than llama3 and linear, sliding windows,
mlp_bias, and a tokenizer with more pieces than `vocab_size`.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_writer as gw  # noqa: E402


class Shards:
    """A checkpoint's tensors over one file or the shards of an index, read as float32 arrays."""

    def __init__(self, model_dir):
        index = os.path.join(model_dir, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        else:
            files = ["model.safetensors"]
        self.files = [SafeTensors(os.path.join(model_dir, name)) for name in files]
        self.where = {n: f for f in self.files for n in f.names()}

    def __contains__(self, name):
        return name in self.where

    def names(self):
        return list(self.where)

    def shape(self, name):
        return self.where[name].shape(name)

    def read(self, name):
        return self.where[name].read(name)


class SafeTensors:
    """Read-only view of one safetensors file; tensors come back as float32 arrays."""

    _DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "F64": "<f8"}

    def __init__(self, path):
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            self.header = json.loads(f.read(n))
        self.header.pop("__metadata__", None)
        self.data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)

    def __contains__(self, name):
        return name in self.header

    def names(self):
        return list(self.header)

    def shape(self, name):
        return tuple(self.header[name]["shape"])

    def read(self, name):
        e = self.header[name]
        if e["dtype"] not in self._DTYPES:
            raise ValueError(f"{name}: dtype {e['dtype']} is not a float type")
        begin, end = e["data_offsets"]
        raw = np.frombuffer(self.data[begin:end], dtype=self._DTYPES[e["dtype"]]).reshape(e["shape"])
        if e["dtype"] == "BF16":
            return (raw.astype(np.uint32) << 16).view(np.float32)
        return raw.astype(np.float32)


def interleave_rope_halves(w, heads, head_dim):
    """[heads * head_dim, in] rows of each head from (first half, second half) to pairs (2i, 2i+1)."""
    return w.reshape(heads, 2, head_dim // 2, -1).swapaxes(1, 2).reshape(w.shape)


def load_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    heads = c["num_attention_heads"]
    c["model_type"] = c.get("model_type") or "llama"
    if c.get("num_key_value_heads") is None:
        c["num_key_value_heads"] = heads
    if c.get("head_dim") is None:
        c["head_dim"] = c["hidden_size"] // heads
    c.setdefault("rms_norm_eps", 1e-6)
    c.setdefault("tie_word_embeddings", False)
    c["qk_norm"] = bool(c.get("qk_norm")) or c["model_type"] == "qwen3"
    c["qkv_bias"] = c["model_type"] == "qwen2" or (c["model_type"] in ("llama", "qwen3") and bool(c.get("attention_bias")))
    c["o_bias"] = c["model_type"] in ("llama", "qwen3") and bool(c.get("attention_bias"))
    if "rope_theta" not in c and "attention" not in c:
        c["rope_theta"] = 10000.0  # Hugging Face's default (Steady's own configs without it have no RoPE)
    att = c.get("attention") or {}
    problems = []
    if c["model_type"] not in ("llama", "mistral", "qwen2", "qwen3"):
        problems.append(f"model_type {c['model_type']!r}")
    scaling = c.get("rope_scaling") or {}
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type not in ("default", "llama3", "linear"):
        problems.append(f"rope_scaling type {rope_type!r}: only llama3 and linear are converted")
    if (c["model_type"] == "mistral" and c.get("sliding_window")) or \
            (c["model_type"] in ("qwen2", "qwen3") and c.get("use_sliding_window")):
        problems.append("a sliding window: llama.cpp's llama/qwen2/qwen3 attend over the whole context")
    if c["model_type"] == "llama" and c.get("mlp_bias"):
        problems.append("mlp_bias")
    if c["model_type"] == "qwen2" and c["head_dim"] != c["hidden_size"] // heads:
        problems.append(f"qwen2 with head_dim {c['head_dim']}: llama.cpp's qwen2 takes hidden_size / heads")
    mechanisms = {att.get("mechanism", "softmax")} | {
        o.get("mechanism", att.get("mechanism", "softmax")) for o in (att.get("layers") or {}).values()}
    if mechanisms != {"softmax"}:
        problems.append(f"attention mechanism {sorted(mechanisms)}: llama.cpp has softmax attention only")
    scale = att.get("scale")
    if scale is not None and not math.isclose(scale, 1 / math.sqrt(c["head_dim"]), rel_tol=1e-6):
        problems.append(f"attention scale {scale} is not 1/sqrt(head_dim), the only scale llama.cpp's llama uses")
    if "rope_theta" not in c:
        problems.append("no rope_theta: llama.cpp's llama architecture always applies RoPE")
    if problems:
        raise SystemExit(f"{model_dir}: cannot convert: " + "; ".join(problems))
    return c


def add_placeholder_tokenizer(w, vocab_size, c):
    """An SPM vocabulary of placeholder pieces, for checkpoints without a tokenizer (ids only)."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256  # unknown, control, control, byte
    tokens += [f"[T{i}]" for i in range(len(tokens), vocab_size)]
    types += [1] * (vocab_size - len(types))
    tokens, types = tokens[:vocab_size], types[:vocab_size]
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_string("tokenizer.ggml.pre", "default")
    w.add_array("tokenizer.ggml.tokens", gw.STRING, tokens)
    w.add_array("tokenizer.ggml.scores", gw.FLOAT32, [0.0] * vocab_size)
    w.add_array("tokenizer.ggml.token_type", gw.INT32, types)
    eos = c.get("eos_token_id")
    if isinstance(eos, list):
        eos = eos[0]
    for key, value in (("bos_token_id", c.get("bos_token_id")), ("eos_token_id", eos)):
        if value is not None:
            w.add_uint32(f"tokenizer.ggml.{key}", value)
    w.add_uint32("tokenizer.ggml.unknown_token_id", 0)
    w.add_bool("tokenizer.ggml.add_bos_token", c.get("bos_token_id") is not None)
    w.add_bool("tokenizer.ggml.add_eos_token", False)


def llama3_rope_factors(c):
    """Llama 3.1's rope_scaling as llama.cpp's rope_freqs: per frequency, the divisor of its angle
    (1 for short wavelengths, factor for long ones, a smooth blend between)."""
    s = c["rope_scaling"]
    hd, base = c["head_dim"], c["rope_theta"]
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old = s["original_max_position_embeddings"]
    out = []
    for i in range(0, hd, 2):
        wavelen = 2 * math.pi / (1.0 / base ** (i / hd))
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def add_tokenizer(w, tokenizer_path, vocab_size, c):
    from sentencepiece import sentencepiece_model_pb2 as pb
    m = pb.ModelProto()
    with open(tokenizer_path, "rb") as f:
        m.ParseFromString(f.read())
    if m.trainer_spec.model_type not in (pb.TrainerSpec.BPE, pb.TrainerSpec.UNIGRAM):
        raise SystemExit(f"{tokenizer_path}: sentencepiece model type {m.trainer_spec.model_type} unsupported")
    if len(m.pieces) > vocab_size:
        raise SystemExit(f"{tokenizer_path}: {len(m.pieces)} pieces but vocab_size is {vocab_size}")
    tokens = [p.piece for p in m.pieces]
    scores = [p.score for p in m.pieces]
    types = [int(p.type) for p in m.pieces]  # sentencepiece's type numbers are llama.cpp's token types
    for i in range(len(m.pieces), vocab_size):  # a vocab padded beyond the tokenizer
        tokens.append(f"[PAD{i}]")
        scores.append(-1000.0)
        types.append(5)  # unused
    w.add_string("tokenizer.ggml.model", "llama")  # sentencepiece (SPM) vocabulary
    w.add_string("tokenizer.ggml.pre", "default")
    w.add_array("tokenizer.ggml.tokens", gw.STRING, tokens)
    w.add_array("tokenizer.ggml.scores", gw.FLOAT32, scores)
    w.add_array("tokenizer.ggml.token_type", gw.INT32, types)
    bos = c.get("bos_token_id", m.trainer_spec.bos_id)
    eos = c.get("eos_token_id", m.trainer_spec.eos_id)
    if isinstance(eos, list):
        eos = eos[0]
    if bos is not None and bos >= 0:
        w.add_uint32("tokenizer.ggml.bos_token_id", bos)
    if eos is not None and eos >= 0:
        w.add_uint32("tokenizer.ggml.eos_token_id", eos)
    if m.trainer_spec.unk_id >= 0:
        w.add_uint32("tokenizer.ggml.unknown_token_id", m.trainer_spec.unk_id)
    w.add_bool("tokenizer.ggml.add_bos_token", bos is not None and bos >= 0)  # as Steady's generate
    w.add_bool("tokenizer.ggml.add_eos_token", False)
    w.add_bool("tokenizer.ggml.add_space_prefix", bool(m.normalizer_spec.add_dummy_prefix))
    w.add_bool("tokenizer.ggml.remove_extra_whitespaces", bool(m.normalizer_spec.remove_extra_whitespaces))


def convert(model_dir, out, type_name, context_length, name):
    c = load_config(model_dir)
    st = Shards(model_dir)
    arch = "qwen3" if c["qk_norm"] else "qwen2" if c["model_type"] == "qwen2" else "llama"
    matrix_type = gw.TYPE_BY_NAME[type_name]
    heads, kv_heads, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]

    w = gw.GGUFWriter(out)
    w.add_string("general.architecture", arch)
    w.add_string("general.name", name or os.path.basename(os.path.normpath(model_dir)))
    w.add_uint32("general.file_type", gw.FILE_TYPE[matrix_type])
    if matrix_type == gw.GGML_Q8_0:
        w.add_uint32("general.quantization_version", 2)
    w.add_uint32(f"{arch}.vocab_size", c["vocab_size"])
    w.add_uint32(f"{arch}.context_length", context_length)
    w.add_uint32(f"{arch}.embedding_length", c["hidden_size"])
    w.add_uint32(f"{arch}.block_count", c["num_hidden_layers"])
    w.add_uint32(f"{arch}.feed_forward_length", c["intermediate_size"])
    w.add_uint32(f"{arch}.attention.head_count", heads)
    w.add_uint32(f"{arch}.attention.head_count_kv", kv_heads)
    w.add_uint32(f"{arch}.attention.key_length", hd)
    w.add_uint32(f"{arch}.attention.value_length", hd)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", c["rms_norm_eps"])
    w.add_uint32(f"{arch}.rope.dimension_count", hd)
    w.add_float32(f"{arch}.rope.freq_base", c["rope_theta"])
    scaling = c.get("rope_scaling") or {}
    if scaling.get("rope_type", scaling.get("type")) == "linear":
        w.add_string(f"{arch}.rope.scaling.type", "linear")
        w.add_float32(f"{arch}.rope.scaling.factor", scaling["factor"])
    tokenizer = os.path.join(model_dir, "tokenizer.model")
    if os.path.exists(tokenizer):
        add_tokenizer(w, tokenizer, c["vocab_size"], c)
    else:
        add_placeholder_tokenizer(w, c["vocab_size"], c)

    used = set()

    def tensor(gguf_name, st_name, transform=None):
        if st_name not in st:
            raise SystemExit(f"{model_dir}: model.safetensors has no tensor {st_name!r}")
        used.add(st_name)
        shape = st.shape(st_name)
        t = gw.GGML_F32 if len(shape) == 1 else matrix_type
        if t == gw.GGML_Q8_0 and shape[-1] % 32 != 0:
            print(f"{st_name}: rows of {shape[-1]} are not whole q8_0 blocks; written f16", file=sys.stderr)
            t = gw.GGML_F16
        w.add_tensor(gguf_name, shape, t, lambda: transform(st.read(st_name)) if transform else st.read(st_name))

    tensor("token_embd.weight", "model.embed_tokens.weight")
    if (c.get("rope_scaling") or {}).get("rope_type") == "llama3":
        factors = llama3_rope_factors(c)
        w.add_tensor("rope_freqs.weight", factors.shape, gw.GGML_F32, lambda: factors)
    for n in range(c["num_hidden_layers"]):
        p, b = f"model.layers.{n}.", f"blk.{n}."
        tensor(b + "attn_norm.weight", p + "input_layernorm.weight")
        suffixes = ("weight", "bias") if c["qkv_bias"] else ("weight",)
        for suffix in suffixes:
            if arch == "llama":
                tensor(b + "attn_q." + suffix, p + "self_attn.q_proj." + suffix, lambda x: interleave_rope_halves(x, heads, hd))
                tensor(b + "attn_k." + suffix, p + "self_attn.k_proj." + suffix, lambda x: interleave_rope_halves(x, kv_heads, hd))
            else:
                tensor(b + "attn_q." + suffix, p + "self_attn.q_proj." + suffix)
                tensor(b + "attn_k." + suffix, p + "self_attn.k_proj." + suffix)
            tensor(b + "attn_v." + suffix, p + "self_attn.v_proj." + suffix)
        if c["qk_norm"]:
            tensor(b + "attn_q_norm.weight", p + "self_attn.q_norm.weight")
            tensor(b + "attn_k_norm.weight", p + "self_attn.k_norm.weight")
        tensor(b + "attn_output.weight", p + "self_attn.o_proj.weight")
        if c["o_bias"]:
            tensor(b + "attn_output.bias", p + "self_attn.o_proj.bias")
        tensor(b + "ffn_norm.weight", p + "post_attention_layernorm.weight")
        tensor(b + "ffn_gate.weight", p + "mlp.gate_proj.weight")
        tensor(b + "ffn_up.weight", p + "mlp.up_proj.weight")
        tensor(b + "ffn_down.weight", p + "mlp.down_proj.weight")
    tensor("output_norm.weight", "model.norm.weight")
    if not c["tie_word_embeddings"]:
        tensor("output.weight", "lm_head.weight")  # tied: llama.cpp reuses token_embd

    leftover = [n for n in st.names() if n not in used and "rotary_emb.inv_freq" not in n]
    if leftover:
        raise SystemExit(f"{model_dir}: tensors the conversion does not account for: {leftover[:5]}")
    w.write()
    return arch


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="Steady checkpoint directory")
    ap.add_argument("--out", required=True, help="GGUF file to write")
    ap.add_argument("--type", default="f32", choices=sorted(gw.TYPE_BY_NAME), help="matrix type (default f32)")
    ap.add_argument("--context-length", type=int, default=65536,
                    help="training context written to the file (llama.cpp's n_ctx_train; default 65536)")
    ap.add_argument("--name", help="general.name (default: the directory's name)")
    a = ap.parse_args()
    arch = convert(a.model, a.out, a.type, a.context_length, a.name)
    print(f"{a.out}: {arch}, {a.type}, {os.path.getsize(a.out)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
