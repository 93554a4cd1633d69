"""Trains a Steady model (softmax, slay, dark or performer attention) and exports a checkpoint.

  /usr/bin/python3 tools/train/train.py --train corpus-data/train.txt --valid corpus-data/valid.txt \\
      --tokenizer corpus-data/tokenizer/tokenizer.model --mechanism softmax --preset small \\
      --steps 2000 --out models/small-softmax

Runs on Debian's python3-torch 1.13 (CPU, fp32) and on PyTorch 2.x with CUDA (bf16 autocast).
Recipes, timings and the file formats: docs/training.md.
"""
import argparse
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data import Tokenizer, eval_batches, random_batch, token_stream  # noqa: E402
from export import export_checkpoint  # noqa: E402
from model import SteadyLM  # noqa: E402

PRESETS = {
    # hidden, intermediate, layers, heads, kv_heads, head_dim
    "smoke": (64, 128, 2, 4, 2, 16),
    "tiny": (128, 384, 4, 8, 4, 16),     # the engine's `steady init --preset tiny` shape
    "small": (256, 768, 4, 16, 8, 16),   # ~5M parameters with an 8k vocabulary
    "base": (512, 1536, 8, 32, 8, 16),   # ~30M parameters: a GPU recipe
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", required=True, help="training text (documents separated by blank lines)")
    ap.add_argument("--valid", help="validation text (never trained on)")
    ap.add_argument("--tokenizer", required=True, help="sentencepiece tokenizer.model")
    ap.add_argument("--out", required=True, help="checkpoint directory to write")
    ap.add_argument("--mechanism", default="softmax", choices=["softmax", "slay", "dark", "performer", "sliced_relu"])
    ap.add_argument("--preset", default="small", choices=sorted(PRESETS))
    for flag in ("--hidden", "--intermediate", "--layers", "--heads", "--kv-heads", "--head-dim"):
        ap.add_argument(flag, type=int, help="override the preset's value")
    ap.add_argument("--rope-theta", type=float, default=10000.0, help="0: no RoPE")
    ap.add_argument("--no-qk-norm", action="store_true")
    ap.add_argument("--untied", action="store_true", help="separate lm_head (default: tied to the embedding)")
    ap.add_argument("--scale", type=float, help="attention logit scale (default 1/sqrt(head_dim))")
    ap.add_argument("--logit-bound", type=float, default=4.0,
                    help="with QK-norm, clamp the q/k norm weights so that |scale q.k| <= this (0: off)")
    # Mechanism parameters (MECHANISMS.md defaults).
    ap.add_argument("--slay-nodes", type=int, default=2, help="R, Gauss-Laguerre nodes")
    ap.add_argument("--slay-anchors", type=int, default=8, help="P, anchor directions")
    ap.add_argument("--slay-features", type=int, default=16, help="M, random features per node")
    ap.add_argument("--dark-features", type=int, default=256, help="m")
    ap.add_argument("--sliced-bins", type=int, default=64, help="bins of the bucketed sliced_relu decoder")
    ap.add_argument("--sliced-coverage", type=float, default=0.999,
                    help="the bucketed range [z_min, z_max) of each layer covers this central fraction of the "
                         "scores measured on validation text")
    ap.add_argument("--dark-rank", type=int, help="r (default head_dim)")
    # Optimization.
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=0, help="optimizer steps (0: run for --time-budget)")
    ap.add_argument("--time-budget", type=float, default=0, help="seconds of training when --steps is 0")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (CPU)")
    ap.add_argument("--compile", action="store_true", help="torch.compile (PyTorch 2.x)")
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=0, help="steps between validation passes (0: end only)")
    ap.add_argument("--eval-tokens", type=int, default=65536)
    ap.add_argument("--cache-dir", help="token stream cache (default: next to --train if writable)")
    ap.add_argument("--export-dtype", default="F32", choices=["F32", "F16", "BF16"])
    ap.add_argument("--golden-lengths", default="1,16,100", help="golden sequence lengths, BOS included")
    args = ap.parse_args(argv)
    if args.steps <= 0 and args.time_budget <= 0:
        ap.error("give --steps or --time-budget")
    return args


def build_config(args, tok):
    hidden, inter, layers, heads, kv_heads, head_dim = PRESETS[args.preset]
    hidden, inter = args.hidden or hidden, args.intermediate or inter
    layers, heads = args.layers or layers, args.heads or heads
    kv_heads, head_dim = args.kv_heads or kv_heads, args.head_dim or head_dim
    scale = args.scale if args.scale else 1.0 / math.sqrt(head_dim)
    if args.mechanism == "softmax":
        attention = {"mechanism": "softmax", "scale": scale}
    elif args.mechanism == "slay":
        attention = {"mechanism": "slay", "nodes": args.slay_nodes, "anchors": args.slay_anchors,
                     "features": args.slay_features, "eps": 1e-3, "delta": 1e-6}
    elif args.mechanism == "sliced_relu":  # z_min / z_max per layer are measured after training
        attention = {"mechanism": "sliced_relu", "projection": "mlp", "decoder": "bucketed", "bins": args.sliced_bins}
    else:  # dark, performer (dark with M = I)
        attention = {"mechanism": "dark", "scale": scale, "features": args.dark_features,
                     "rank": args.dark_rank or head_dim, "delta": 1e-6}
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": tok.vocab_size,
           "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
           "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
           "rms_norm_eps": 1e-5, "tie_word_embeddings": not args.untied, "qk_norm": not args.no_qk_norm,
           "bos_token_id": tok.bos_id, "eos_token_id": tok.eos_id, "attention": attention}
    if args.rope_theta > 0:
        cfg["rope_theta"] = args.rope_theta
    return cfg


def blas_in_use():
    """Which BLAS library torch loaded (Debian's torch links libblas.so.3, whose alternative may be the
    slow reference BLAS)."""
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if "blas" in line and line.split()[-1].startswith("/")}
    except OSError:
        return "unknown"
    real = sorted({os.path.realpath(p) for p in libs})
    if any("openblas" in p for p in real):
        return "openblas"
    if any("/blas/" in p for p in real):
        return "reference"
    return ",".join(real) or "none"


def param_groups(model, weight_decay):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        # Matrices decay; norms and the learned dark geometry M (identity at init) do not.
        (decay if p.dim() >= 2 and ".dark." not in name else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def qk_norm_weights(model):
    return [p for name, p in model.named_parameters() if name.endswith(("q_norm.weight", "k_norm.weight"))]


def learning_rate(args, step, progress):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    floor = args.lr * args.min_lr_ratio
    return floor + 0.5 * (args.lr - floor) * (1 + math.cos(math.pi * min(1.0, progress)))


def evaluate(model, stream, args, bos, device):
    model.eval()
    total, count = 0.0, 0
    seq_len = min(args.seq_len, len(stream) - 1)
    with torch.no_grad():
        for x, y in eval_batches(stream, args.batch_size, seq_len, bos, args.eval_tokens):
            x, y = x.to(device), y.to(device)
            with autocast(device):
                logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1),
                                                     reduction="sum")
            total += loss.item()
            count += y.numel()
    model.train()
    return total / max(count, 1)


def autocast(device):
    if device.type == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return torch.autocast(device_type="cpu", enabled=False)


def sliced_score_ranges(model, stream, args, bos, device):
    """Per layer, the range [z_min, z_max) of the bucketed sliced_relu decoder: the central
    --sliced-coverage fraction of all query and key scores over validation windows, widened by 5% on
    each side (keys outside it land in the tail bins, approximately). Returns {"N": {"z_min", "z_max"}}."""
    mechs = [layer.self_attn.mechanism for layer in model.model.layers]
    scores = [[] for _ in mechs]
    for m in mechs:
        m.record_scores = True
    model.eval()
    seq_len = min(args.seq_len, len(stream) - 1)
    with torch.no_grad():
        for x, _ in eval_batches(stream, args.batch_size, seq_len, bos, min(args.eval_tokens, 32768)):
            model(x.to(device))
            for i, m in enumerate(mechs):
                scores[i].extend(z.reshape(-1).float().cpu() for z in m.last_scores)
    model.train()
    tail = (1.0 - args.sliced_coverage) / 2
    ranges = {}
    for i, m in enumerate(mechs):
        m.record_scores, m.last_scores = False, None
        z = torch.cat(scores[i])
        if z.numel() > 1 << 24:  # torch.quantile's input limit
            z = z[torch.randperm(z.numel(), generator=torch.Generator().manual_seed(0))[:1 << 24]]
        lo, hi = torch.quantile(z, tail).item(), torch.quantile(z, 1.0 - tail).item()
        pad = 0.05 * max(hi - lo, 1e-3)
        ranges[str(i)] = {"z_min": round(lo - pad, 4), "z_max": round(hi + pad, 4)}
    return ranges


def golden_sequences(stream, bos, lengths):
    seqs, offset = [], 0
    for n in lengths:
        n = min(n, len(stream) + 1)
        seqs.append([bos] + stream[offset:offset + n - 1].tolist())
        offset += n
    return seqs


def train(args):
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 matmuls outside autocast (feature maps)
    blas = blas_in_use()
    if device.type == "cpu" and blas == "reference":
        print("train: torch is using the reference BLAS (about 20x slower); install libopenblas0-pthread or run "
              "with LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread", file=sys.stderr)

    tok = Tokenizer(args.tokenizer)
    cache_dir = args.cache_dir
    if cache_dir is None and os.access(os.path.dirname(os.path.abspath(args.train)), os.W_OK):
        cache_dir = os.path.join(os.path.dirname(os.path.abspath(args.train)), ".token-cache")
    t0 = time.time()
    train_stream = token_stream(args.train, tok, cache_dir)
    valid_stream = token_stream(args.valid, tok, cache_dir) if args.valid else None
    print("train: %d training tokens%s (%.1f s to load), vocab %d" % (
        len(train_stream), ", %d validation tokens" % len(valid_stream) if valid_stream is not None else "",
        time.time() - t0, tok.vocab_size))

    cfg = build_config(args, tok)
    model = SteadyLM(cfg, seed=args.seed, performer=(args.mechanism == "performer"))
    model.init_weights(args.seed)
    model.to(device)
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print("train: %s, %d trainable parameters, device %s, torch %s, BLAS %s, %d threads" % (
        args.mechanism, n_params, device, torch.__version__, blas, torch.get_num_threads()))
    step_model = torch.compile(model) if args.compile else model

    optimizer = torch.optim.AdamW(param_groups(model, args.weight_decay), lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    norm_weights = qk_norm_weights(model)
    scale = cfg["attention"].get("scale", 1.0 / math.sqrt(cfg["head_dim"]))
    # |scale q.k| <= scale |q| |k| <= scale * head_dim * w_max^2 for RMS-normed q, k with |w| <= w_max.
    w_max = math.sqrt(args.logit_bound / (scale * cfg["head_dim"])) if args.logit_bound > 0 else None

    gen = torch.Generator().manual_seed(args.seed)
    history, losses = [], []
    start = time.time()
    tokens = 0
    step = 0
    while True:
        elapsed = time.time() - start
        progress = step / args.steps if args.steps > 0 else elapsed / args.time_budget
        if progress >= 1.0:
            break
        lr = learning_rate(args, step, progress)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = random_batch(train_stream, args.batch_size, args.seq_len, tok.bos_id, gen)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with autocast(device):
            logits = step_model(x)
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if args.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        if w_max is not None:
            with torch.no_grad():
                for p in norm_weights:
                    p.clamp_(-w_max, w_max)
        tokens += y.numel()
        step += 1
        losses.append(loss.item())
        if step % args.log_every == 0 or step == 1:
            dt = time.time() - start
            window = losses[-args.log_every:]
            print("step %5d  loss %.4f  lr %.2e  %.0f tok/s  %.0f s" % (step, sum(window) / len(window), lr,
                                                                       tokens / dt, dt), flush=True)
            history.append({"step": step, "loss": sum(window) / len(window), "seconds": round(dt, 1)})
        if valid_stream is not None and args.eval_every and step % args.eval_every == 0:
            vl = evaluate(model, valid_stream, args, tok.bos_id, device)
            print("step %5d  valid loss %.4f  ppl %.2f" % (step, vl, math.exp(vl)), flush=True)
            history.append({"step": step, "valid_loss": vl})
    seconds = time.time() - start
    info = {"mechanism": args.mechanism, "args": vars(args), "steps": step, "tokens": tokens,
            "seconds": round(seconds, 1), "tokens_per_second": round(tokens / max(seconds, 1e-9)),
            "parameters": n_params, "torch": torch.__version__, "device": str(device), "blas": blas,
            "threads": torch.get_num_threads(), "first_loss": losses[0] if losses else None,
            "final_train_loss": sum(losses[-20:]) / max(1, len(losses[-20:])), "history": history}
    if valid_stream is not None:
        info["valid_loss"] = evaluate(model, valid_stream, args, tok.bos_id, device)
        print("final valid loss %.4f  ppl %.2f" % (info["valid_loss"], math.exp(info["valid_loss"])))
    print("train: %d steps, %d tokens in %.0f s (%.0f tok/s)" % (step, tokens, seconds, info["tokens_per_second"]))

    golden_source = valid_stream if valid_stream is not None else train_stream
    if args.mechanism == "sliced_relu":
        cfg["attention"]["layers"] = sliced_score_ranges(model, golden_source, args, tok.bos_id, device)
        print("train: sliced_relu bucketed ranges %s" % json.dumps(cfg["attention"]["layers"]))
    lengths = [int(x) for x in args.golden_lengths.split(",") if x]
    export_checkpoint(model.cpu().float(), cfg, args.tokenizer, args.out, args.export_dtype,
                      golden_sequences(golden_source, tok.bos_id, lengths), info)
    print("train: wrote %s" % args.out)
    return info, model


if __name__ == "__main__":
    train(parse_args())
