#!/usr/bin/env python3
"""Steady's logits against Hugging Face transformers' own Llama and Qwen implementations, on random
checkpoints in the Hugging Face layout: an implementation we did not write, on the GPU image
(PyTorch + transformers; scripts/gpu_session.sh runs it in PART=compare).

For each architecture (llama, llama with llama3 rope scaling, qwen2 with its q/k/v biases, qwen3 with
its q/k norms) a random checkpoint is made, either by transformers itself (the model class built from
a config with a fixed seed, `save_pretrained` to safetensors in fp32) or by --generator, a command
with {arch} and {out} in it (the architecture issue's generator in tools/). Then for two prompts of
random ids, every position's logits:
  - transformers, fp32, eager attention, on --device (the reference);
  - `steady logits --ids ... --out FILE` on the same device: on cuda twice, --cuda-weights f32 (held
    to 1e-4 of the largest |logit|) and the bf16 serving path (3e-2); on cpu in fp32 (1e-4).
Greedy agreement (each position's argmax) is reported beside; near ties may differ in bf16.

  python3 tools/bench/hf_compare.py --steady build/bin/steady --work DIR [--device cuda|cpu]
                                    [--generator 'CMD {arch} {out}'] [--tiny] [--out FILE.json]

Exit 0 when every comparison is within its tolerance, 1 otherwise (a checkpoint steady cannot load
counts, with its message), 77 without transformers.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys

ARCHS = ("llama", "llama3_rope", "qwen2", "qwen3")
TOLERANCE = {"f32": 1e-4, "bf16": 3e-2}


def shape(tiny):
    if tiny:  # the dry run: seconds on a CPU
        return dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16)
    # head_dim 64 and group 4, as the llama1b shape, so the GPU kernels' common case is exercised.
    return dict(vocab_size=2048, hidden_size=512, intermediate_size=1024, num_hidden_layers=3, num_attention_heads=8,
                num_key_value_heads=2, head_dim=64)


def make_checkpoint(arch, out, tiny, torch, transformers):
    s = shape(tiny)
    common = dict(s, rms_norm_eps=1e-6, max_position_embeddings=4096, tie_word_embeddings=False,
                  initializer_range=0.1, bos_token_id=1, eos_token_id=2)
    rope = {"rope_type": "default"}
    if arch == "llama3_rope":
        rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 256}
    if int(transformers.__version__.split(".")[0]) >= 5:
        # transformers 5 keeps rope_theta and the scaling in one rope_parameters (so its config.json does)
        common["rope_parameters"] = dict(rope, rope_theta=10000.0)
    else:
        common["rope_theta"] = 10000.0
        if arch == "llama3_rope":
            common["rope_scaling"] = rope
    if arch in ("llama", "llama3_rope"):
        config, cls = transformers.LlamaConfig(**common), transformers.LlamaForCausalLM
    elif arch == "qwen2":
        config, cls = transformers.Qwen2Config(**common), transformers.Qwen2ForCausalLM
    else:
        config, cls = transformers.Qwen3Config(**common), transformers.Qwen3ForCausalLM
    torch.manual_seed(1234 + ARCHS.index(arch))
    model = cls(config).float()
    with torch.no_grad():  # norms away from 1 and biases away from 0, so that both are exercised
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.8, 1.2)
            elif name.endswith(".bias"):
                p.normal_(0.0, 0.1)
    model.save_pretrained(out)  # safetensors (transformers 5 has no other format, nor the flag)


def hf_logits(path, ids, device, torch, transformers):
    kwargs = dict(attn_implementation="eager")
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kwargs)
    except TypeError:  # transformers before 4.56 names it torch_dtype
        model = transformers.AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32, **kwargs)
    model = model.to(device).eval()
    with torch.no_grad():
        out = model(torch.tensor([ids], device=device)).logits[0].float().cpu()
    del model
    return out


def steady_logits(steady, path, ids, device, precision, work, torch):
    out = os.path.join(work, "logits.bin")
    cmd = [steady, "logits", "--model", path, "--ids", ",".join(map(str, ids)), "--out", out, "--device", device]
    if device == "cuda":
        cmd += ["--cuda-weights", precision]
    else:  # fp32 arithmetic on the checkpoint's values (auto rounds the activations for bf16 matrices)
        cmd += ["--cpu-weights", "stored"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError((p.stderr.strip().splitlines() or ["rc %d" % p.returncode])[-1])
    meta = json.loads(p.stdout.strip().splitlines()[-1])
    with open(out, "rb") as f:
        data = bytearray(f.read())
    return torch.frombuffer(data, dtype=torch.float32).reshape(meta["tokens"], meta["vocab"]).clone()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steady", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--generator", default="")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    try:
        import torch
        import transformers
    except ImportError as e:
        print("hf_compare: needs PyTorch and transformers (the GPU image has both): %s" % e)
        sys.exit(77)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("hf_compare: no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference stays fp32
    os.makedirs(args.work, exist_ok=True)
    gen = torch.Generator().manual_seed(7)
    vocab = shape(args.tiny)["vocab_size"]
    prompts = [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in ((24, 96) if args.tiny else (64, 700))]
    runs = [("cuda", "f32"), ("cuda", "bf16")] if args.device == "cuda" else [("cpu", "f32")]
    rows, ok = [], True
    for arch in ARCHS:
        path = os.path.join(args.work, arch)
        try:
            if args.generator:
                subprocess.run(shlex.split(args.generator.format(arch=arch, out=path)), check=True, timeout=300)
            else:
                make_checkpoint(arch, path, args.tiny, torch, transformers)
            refs = [hf_logits(path, ids, args.device, torch, transformers) for ids in prompts]
        except Exception as e:  # noqa: BLE001 - reported per checkpoint
            rows.append({"checkpoint": arch, "device": "transformers", "error": "%s: %s" % (type(e).__name__, e)})
            ok = False
            print("%-12s transformers failed: %s" % (arch, e), flush=True)
            continue
        for device, precision in runs:
            label = "%s %s" % (device, precision)
            try:
                worst, agree, tokens = 0.0, 0, 0
                for ids, ref in zip(prompts, refs):
                    got = steady_logits(args.steady, path, ids, device, precision, args.work, torch)
                    worst = max(worst, ((got - ref).abs().max() / ref.abs().max()).item())
                    agree += int((got.argmax(-1) == ref.argmax(-1)).sum())
                    tokens += len(ids)
            except Exception as e:  # noqa: BLE001
                rows.append({"checkpoint": arch, "device": label, "error": str(e)})
                ok = False
                print("%-12s %-10s steady failed: %s" % (arch, label, e), flush=True)
                continue
            tol = TOLERANCE[precision]
            rows.append({"checkpoint": arch, "device": label, "max_rel": worst, "argmax_agree": agree, "tokens": tokens,
                         "tolerance": tol, "pass": worst <= tol})
            ok = ok and worst <= tol
            print("%-12s %-10s max |diff| / max |logit| %.2e (tolerance %.0e), argmax %d of %d" % (
                arch, label, worst, tol, agree, tokens), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"torch": torch.__version__, "transformers": transformers.__version__, "rows": rows}, f, indent=2)
    failed = [r for r in rows if "error" in r or not r["pass"]]
    print("%d comparisons, %d failed%s" % (len(rows), len(failed), (": " + "; ".join(
        "%s %s" % (r["checkpoint"], r["device"]) for r in failed[:6])) if failed else ""))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
