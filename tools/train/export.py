"""Checkpoint export in the engine's format (docs/checkpoint-format.md, docs/training.md) and the
golden file, plus a loader for both (used by evaluate.py and the tests).

A checkpoint directory holds:
  config.json         HF Llama keys + "qk_norm" + "attention": {"mechanism", "scale", mechanism keys}
  model.safetensors   every tensor of model.checkpoint_tensors(), F32 (default), F16 or BF16
  tokenizer.model     the sentencepiece model the ids come from
  golden.safetensors  a few token sequences and the logits the trainer computes for them
  training.json       how it was trained (arguments, steps, losses, tokens/s); informational

safetensors is written here with struct + json: Debian's torch 1.13 has no safetensors package.
Layout: 8-byte little-endian header length, JSON header padded with spaces to a multiple of 8,
then the tensors contiguous, in header order, with no gaps.

  python3 export.py --check CHECKPOINT_DIR     reloads the checkpoint and compares with its golden file
"""
import argparse
import json
import os
import shutil
import struct
import sys

import torch

_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32}
_NAMES = {v: k for k, v in _DTYPES.items()}


def _tensor_bytes(t):
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: write its bits
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def write_safetensors(path, tensors, metadata=None):
    """tensors: name -> torch tensor (written in its own dtype, in dict order). Atomic (temp + rename)."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        blob = _tensor_bytes(t)
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_safetensors_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)), 8 + n


def read_safetensors(path):
    """name -> tensor (in the file's dtype), and the metadata dict."""
    header, start = read_safetensors_header(path)
    with open(path, "rb") as f:
        data = f.read()[start:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(data[begin:end])
        if info["dtype"] == "BF16":
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16) if raw else torch.empty(0, dtype=torch.bfloat16)
        else:
            t = torch.frombuffer(raw, dtype=_DTYPES[info["dtype"]]) if raw else torch.empty(0, dtype=_DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"]).clone()
    return out, header.get("__metadata__", {})


def export_checkpoint(model, cfg, tokenizer_path, out_dir, dtype="F32", golden_sequences=(), training_info=None,
                      golden_vocab_stride=1):
    """Writes config.json, model.safetensors, tokenizer.model, golden.safetensors and training.json.
    The golden logits are computed in fp64 from the weights as written (after rounding to `dtype`),
    by a model rebuilt from the files just written, so they describe the checkpoint, not the trainer's
    in-memory state."""
    os.makedirs(out_dir, exist_ok=True)
    torch_dtype = _DTYPES[dtype]
    tensors = {}
    for name, t in model.checkpoint_tensors().items():
        # The fixed random tensors of slay/dark stay F32 whatever the weights' dtype: they are small and
        # define the feature map exactly.
        keep_f32 = ".slay." in name or ".dark." in name
        tensors[name] = t.detach().float() if keep_f32 else t.detach().to(torch_dtype)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors,
                      {"format": "pt", "steady_format_version": "1"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    shutil.copyfile(tokenizer_path, os.path.join(out_dir, "tokenizer.model"))
    if training_info is not None:
        with open(os.path.join(out_dir, "training.json"), "w") as f:
            json.dump(training_info, f, indent=2)
            f.write("\n")
    if golden_sequences:
        reloaded = load_checkpoint(out_dir, dtype=torch.float64)
        write_golden(reloaded, golden_sequences, os.path.join(out_dir, "golden.safetensors"), dtype,
                     golden_vocab_stride)


def load_checkpoint(ckpt_dir, dtype=torch.float32, override=None):
    """A SteadyLM from a checkpoint dir. `override` replaces the attention object, keeping "scale"
    (as the engine's --mechanism does), e.g. {"mechanism": "taylor", "order": 4}."""
    from model import SteadyLM
    with open(os.path.join(ckpt_dir, "config.json")) as f:
        cfg = json.load(f)
    if override:
        att = {"scale": cfg["attention"]["scale"]} if "scale" in cfg.get("attention", {}) else {}
        att.update(override)
        cfg["attention"] = att
    model = SteadyLM(cfg)
    tensors, _ = read_safetensors(os.path.join(ckpt_dir, "model.safetensors"))
    state = {k: v.to(dtype) for k, v in tensors.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or (unexpected and not override):
        raise ValueError("%s: missing tensors %s, unexpected %s" % (ckpt_dir, missing[:5], unexpected[:5]))
    return model.to(dtype).eval()


def write_golden(model, sequences, path, weights_dtype, vocab_stride=1):
    """golden.safetensors: for sequence i, "golden.i.tokens" I32 [T] and "golden.i.logits" F32 [T, V],
    the logits at every position (the model's forward in fp64, rounded to F32). V is the vocabulary, or
    with vocab_stride > 1 (version 2) every vocab_stride-th token id, listed in "golden.i.vocab" I32 [V]:
    a golden file of 1/stride the size that still checks every position."""
    tensors = {}
    with torch.no_grad():
        for i, seq in enumerate(sequences):
            ids = torch.tensor([list(seq)], dtype=torch.long)
            logits = model(ids)[0]
            tensors["golden.%d.tokens" % i] = ids[0].to(torch.int32)
            if vocab_stride > 1:
                vocab = torch.arange(0, logits.shape[-1], vocab_stride)
                tensors["golden.%d.vocab" % i] = vocab.to(torch.int32)
                logits = logits[:, vocab]
            tensors["golden.%d.logits" % i] = logits.float()
    write_golden_tensors(path, tensors, len(sequences), model.cfg, weights_dtype, vocab_stride)


def write_golden_tensors(path, tensors, count, cfg, weights_dtype, vocab_stride):
    att = cfg.get("attention", {})
    write_safetensors(path, tensors, {"format": "steady-golden", "version": "2" if vocab_stride > 1 else "1",
                                      "sequences": str(count), "mechanism": att.get("mechanism", "softmax"),
                                      "computed_in": "float64", "weights_dtype": weights_dtype})


def check_golden(ckpt_dir, dtype=torch.float64):
    """Max |logit difference| between the checkpoint's forward now and its golden file."""
    model = load_checkpoint(ckpt_dir, dtype=dtype)
    golden, _ = read_safetensors(os.path.join(ckpt_dir, "golden.safetensors"))
    worst = 0.0
    with torch.no_grad():
        i = 0
        while "golden.%d.tokens" % i in golden:
            ids = golden["golden.%d.tokens" % i].long()[None]
            logits = model(ids)[0].double()
            if "golden.%d.vocab" % i in golden:
                logits = logits[:, golden["golden.%d.vocab" % i].long()]
            worst = max(worst, (logits - golden["golden.%d.logits" % i].double()).abs().max().item())
            i += 1
    return worst, i


def thin_golden(ckpt_dir, vocab_stride):
    """Rewrites a version-1 golden file as version 2 keeping every vocab_stride-th column: the same
    values (no recomputation), 1/stride of the bytes. Atomic (write_safetensors)."""
    path = os.path.join(ckpt_dir, "golden.safetensors")
    golden, meta = read_safetensors(path)
    if meta.get("version") != "1":
        raise ValueError("%s: version %s, not a full-vocabulary golden file" % (path, meta.get("version")))
    tensors, count = {}, int(meta["sequences"])
    for i in range(count):
        logits = golden["golden.%d.logits" % i]
        vocab = torch.arange(0, logits.shape[-1], vocab_stride)
        tensors["golden.%d.tokens" % i] = golden["golden.%d.tokens" % i]
        tensors["golden.%d.vocab" % i] = vocab.to(torch.int32)
        tensors["golden.%d.logits" % i] = logits[:, vocab].contiguous()
    meta = dict(meta, version="2")
    write_safetensors(path, tensors, meta)


def store_as(src_dir, out_dir, dtype):
    """Writes src_dir's checkpoint to out_dir with its weights in `dtype` (dark's and slay's fixed
    tensors stay F32), the golden logits recomputed in fp64 from the rounded weights for the same token
    sequences and vocabulary stride, training.json carried over with "stored_as" added. out_dir must
    not exist; it is written beside itself and renamed into place."""
    if os.path.exists(out_dir):
        raise ValueError("%s exists" % out_dir)
    model = load_checkpoint(src_dir, dtype=torch.float64)
    with open(os.path.join(src_dir, "config.json")) as f:
        cfg = json.load(f)
    golden, meta = read_safetensors(os.path.join(src_dir, "golden.safetensors"))
    count = int(meta.get("sequences", 0))
    sequences = [golden["golden.%d.tokens" % i].tolist() for i in range(count)]
    vocab = golden.get("golden.0.vocab")
    stride = int(vocab[1] - vocab[0]) if vocab is not None and len(vocab) > 1 else 1
    info = None
    if os.path.isfile(os.path.join(src_dir, "training.json")):
        with open(os.path.join(src_dir, "training.json")) as f:
            info = json.load(f)
        info["stored_as"] = {"dtype": dtype, "from": meta.get("weights_dtype")}
    partial = "%s.partial-%d" % (out_dir.rstrip("/"), os.getpid())
    export_checkpoint(model, cfg, os.path.join(src_dir, "tokenizer.model"), partial, dtype, sequences, info,
                      golden_vocab_stride=stride)
    os.replace(partial, out_dir)


def main():
    ap = argparse.ArgumentParser(description="Checks an exported checkpoint against its golden file")
    ap.add_argument("--check", required=True, metavar="CHECKPOINT_DIR")
    ap.add_argument("--thin", type=int, metavar="N", help="first rewrite the golden file keeping every Nth vocab column")
    ap.add_argument("--store-as", choices=["F32", "F16", "BF16"],
                    help="first write CHECKPOINT_DIR's weights in DTYPE to --out (golden recomputed), then check --out")
    ap.add_argument("--out", help="with --store-as: the new checkpoint directory (must not exist)")
    args = ap.parse_args()
    if args.store_as:
        if not args.out:
            ap.error("--store-as needs --out")
        store_as(args.check, args.out, args.store_as)
        args.check = args.out
    if args.thin:
        thin_golden(args.check, args.thin)
    worst, n = check_golden(args.check)
    print("%s: %d golden sequences, max |logit diff| %.3g" % (args.check, n, worst))
    sys.exit(0 if n > 0 and worst < 1e-4 else 1)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
