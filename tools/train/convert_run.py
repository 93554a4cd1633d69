"""The stages of a conversion (convert.py checks the inputs and calls run()): statistics and dark's M,
stage 1 (attention transfer), stage 2 (finetune), export. Every step's state can be saved to --work
and resumed from; the exported directory is written beside --out and renamed into place."""
import argparse
import glob
import json
import math
import os
import shutil
import time

import torch
import torch.nn.functional as F

import transfer
from convert import EXIT_PAUSED, STATE_VERSION, Stopper, save_state
from data import eval_batches, random_batch, token_stream
from export import export_checkpoint, load_checkpoint
from model import SteadyLM, layer_attention
from train import blas_in_use, golden_sequences, learning_rate


class Meter:
    """CPU and wall seconds, steps and tokens per stage, summed over every invocation of one conversion."""

    def __init__(self, state):
        self.costs = state.setdefault("costs", {})
        self.cpu, self.wall = time.process_time(), time.time()

    def charge(self, stage, steps=0, tokens=0, teacher_tokens=0):
        c = self.costs.setdefault(stage, {"steps": 0, "tokens": 0, "teacher_tokens": 0, "cpu_seconds": 0.0,
                                          "wall_seconds": 0.0})
        cpu, wall = time.process_time(), time.time()
        c["cpu_seconds"] += cpu - self.cpu
        c["wall_seconds"] += wall - self.wall
        self.cpu, self.wall = cpu, wall
        c["steps"] += steps
        c["tokens"] += tokens
        c["teacher_tokens"] += teacher_tokens


def teacher_logit_bound(args):
    if args.logit_bound is not None:
        return args.logit_bound
    try:
        with open(os.path.join(args.teacher, "training.json")) as f:
            return float(json.load(f)["args"].get("logit_bound") or 0)
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def dark_layers(student, cfg):
    """Indices of the layers whose M is dark's and learned (dark or window_dark, not performer/lfk)."""
    out = []
    for i, layer in enumerate(student.model.layers):
        tensors = layer.self_attn.mechanism.tensors
        if layer_attention(cfg, i)["mechanism"] in ("dark", "window_dark") and isinstance(
                getattr(tensors, "M", None), torch.nn.Parameter):
            out.append(i)
    return out


def initialize_dark(args, plan, teacher, student, device):
    """Calibration statistics of every layer's queries and keys; dark's M from them (--dark-init)."""
    recorders = transfer.record_attention(teacher)
    scale = plan["teacher_cfg"].get("attention", {}).get("scale", 1.0 / math.sqrt(plan["teacher_cfg"]["head_dim"]))
    moments, tokens = None, 0
    with torch.no_grad():
        for x, _ in eval_batches(plan["calib_stream"], args.stage1_batch, args.seq_len, plan["tok"].bos_id,
                                 args.stats_batches * args.stage1_batch * args.seq_len):
            transfer.run_layers(teacher, x.to(device))
            moments = transfer.second_moments(recorders, scale, moments)
            tokens += x.numel()
    info = {"dark_init": args.dark_init, "tokens": tokens, "layers": {}}
    learned = dark_layers(student, plan["cfg"])
    for i, (total, n) in enumerate(moments):
        lam = total / (2 * n)
        M, layer_info = transfer.dark_init(lam, args.dark_init if i in learned else "identity", args.dark_clip)
        info["layers"][str(i)] = layer_info
        if i in learned:
            target = student.model.layers[i].self_attn.mechanism.tensors.M
            rank = target.shape[1]
            with torch.no_grad():
                if rank == M.shape[1]:
                    target.copy_(M.to(target.dtype))
                elif args.dark_init != "identity":  # low rank: the r directions of Sigma with most weight
                    evals, evecs = torch.linalg.eigh(M @ M.transpose(-1, -2))
                    top = evecs[..., -rank:] * evals[..., -rank:].clamp_min(0).sqrt()[..., None, :]
                    target.copy_(top.transpose(-1, -2).to(target.dtype))
    return info, tokens


def new_state(key):
    return {"version": STATE_VERSION, "key": key, "stage": "init", "step": 0, "history": [], "costs": {}}


def stage2_parameters(args, student, state):
    """The finetune's parameters (all, or adapters plus the mechanisms' own) in AdamW groups."""
    if args.finetune == "lora":
        if not state.get("lora_added"):
            state["lora_added"] = True
        mech = [p for layer in student.model.layers if layer.self_attn.mechanism.tensors is not None
                for p in layer.self_attn.mechanism.tensors.parameters()]
        for p in mech:
            p.requires_grad_(True)
        adapters = [p for n, p in student.named_parameters() if "parametrizations" in n and p.requires_grad
                    and not n.endswith(".original")]
        return [{"params": adapters, "weight_decay": 0.0}, {"params": mech, "weight_decay": 0.0}]
    decay, no_decay = [], []
    for name, p in student.named_parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 and ".dark." not in name else no_decay).append(p)
    return [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def run(args, plan, key, state):
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    tok, cfg = plan["tok"], plan["cfg"]
    bos = tok.bos_id
    for stale in glob.glob(args.out.rstrip("/") + ".partial-*"):  # a killed export's leftovers
        shutil.rmtree(stale, ignore_errors=True)
    train_stream = token_stream(args.train, tok, _cache(args, args.train)) if args.train else None
    valid_stream = token_stream(args.valid, tok, _cache(args, args.valid)) if args.valid else None
    teacher = load_checkpoint(args.teacher).to(device)
    student = SteadyLM(cfg, seed=args.seed, dark_mode=plan["dark_mode"])
    missing, unexpected = student.load_state_dict(teacher.state_dict(), strict=False)
    if unexpected or any(".dark." not in n and ".slay." not in n for n in missing):
        raise RuntimeError("student/teacher tensors differ: missing %s, unexpected %s" % (missing[:4], unexpected[:4]))
    if state is None:
        state = new_state(key)
    else:
        print("convert: resuming %s at %s step %d" % (args.work, state["stage"], state["step"]), flush=True)
    if state.get("lora_added"):
        transfer.add_low_rank(student, args.lora_rank, args.lora_alpha,
                              transfer.LORA_ATTENTION + (transfer.LORA_MLP if args.lora_mlp else ()), args.seed)
    if "model" in state:
        student.load_state_dict(state["model"])
    student.to(device)
    meter, stopper = Meter(state), Stopper(args)
    history = state["history"]

    def evaluate(stage, step):
        if valid_stream is None:
            return
        loss, acc = transfer.evaluate(student, eval_batches(valid_stream, args.batch_size, args.seq_len, bos,
                                                            args.eval_tokens))
        history.append({"stage": stage, "step": step, "valid_loss": round(loss, 5), "valid_ppl": round(math.exp(loss), 3),
                        "valid_acc": round(acc, 5)})
        print("%s step %4d  valid loss %.4f  ppl %.2f  acc %.4f" % (stage, step, loss, math.exp(loss), acc), flush=True)
        meter.charge("eval")

    def checkpoint(opt=None, gen=None):
        state["model"] = student.state_dict()
        state["opt"] = opt.state_dict() if opt is not None else None
        state["gen"] = gen.get_state() if gen is not None else None
        save_state(args.work, state)

    def pause(reason, opt, gen):
        checkpoint(opt, gen)
        print("convert: paused (%s) at %s step %d; the same command resumes from %s" % (
            reason, state["stage"], state["step"], args.work), flush=True)
        return EXIT_PAUSED

    if state["stage"] == "init":
        state["init"], tokens = initialize_dark(args, plan, teacher, student, device)
        meter.charge("statistics", teacher_tokens=tokens)
        if valid_stream is not None:
            t_loss, t_acc = transfer.evaluate(teacher, eval_batches(valid_stream, args.batch_size, args.seq_len, bos,
                                                                    args.eval_tokens))
            state["teacher_valid"] = {"loss": round(t_loss, 5), "ppl": round(math.exp(t_loss), 3), "acc": round(t_acc, 5)}
            print("teacher  valid loss %.4f  ppl %.2f  acc %.4f" % (t_loss, math.exp(t_loss), t_acc), flush=True)
            meter.charge("eval")
        evaluate("init", 0)
        state["stage"], state["step"] = "stage1", 0
        checkpoint()

    if state["stage"] == "stage1":
        params = transfer.mechanism_parameters(student)
        if args.stage1_steps > 0 and params:
            opt = torch.optim.Adam(params, lr=args.stage1_lr)
            if state.get("opt"):
                opt.load_state_dict(state["opt"])
            gen = torch.Generator().manual_seed(args.seed + 101)
            if state.get("gen") is not None:
                gen.set_state(state["gen"])
            recorders = transfer.record_attention(teacher)
            sched = argparse.Namespace(lr=args.stage1_lr, warmup=args.warmup, min_lr_ratio=args.min_lr_ratio)
            while state["step"] < args.stage1_steps:
                for group in opt.param_groups:
                    group["lr"] = learning_rate(sched, state["step"], state["step"] / args.stage1_steps)
                x, _ = random_batch(plan["calib_stream"], args.stage1_batch, args.seq_len, bos, gen)
                with torch.no_grad():
                    transfer.run_layers(teacher, x.to(device))
                loss, relative = transfer.transfer_loss(student, recorders)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                transfer.clamp_gates(student)
                state["step"] += 1
                stopper.step()
                meter.charge("stage1", steps=1, tokens=x.numel(), teacher_tokens=x.numel())
                if state["step"] % 10 == 0 or state["step"] == 1:
                    state.setdefault("stage1_log", []).append({"step": state["step"], "loss": loss.item(),
                                                               "relative_mse": [round(r, 5) for r in relative]})
                    print("stage1 step %4d  mse %.3e  relative per layer %s" % (
                        state["step"], loss.item(), " ".join("%.3f" % r for r in relative)), flush=True)
                reason = stopper.reason()
                if reason:
                    return pause(reason, opt, gen)
                if state["step"] % args.save_every == 0:
                    checkpoint(opt, gen)
            evaluate("stage1", state["step"])
        elif args.stage1_steps > 0:
            state["stage1_note"] = "nothing to train: the target's mechanisms have no parameters of their own"
            print("stage1: %s" % state["stage1_note"], flush=True)
        state["stage"], state["step"], state["opt"], state["gen"] = "stage2", 0, None, None
        checkpoint()

    if state["stage"] == "stage2":
        if args.stage2_steps > 0:
            if args.finetune == "lora" and not state.get("lora_added"):
                transfer.add_low_rank(student, args.lora_rank, args.lora_alpha,
                                      transfer.LORA_ATTENTION + (transfer.LORA_MLP if args.lora_mlp else ()), args.seed)
            groups = stage2_parameters(args, student, state)
            opt = torch.optim.AdamW(groups, lr=args.stage2_lr, betas=(0.9, 0.95), eps=1e-8)
            if state.get("opt"):
                opt.load_state_dict(state["opt"])
            gen = torch.Generator().manual_seed(args.seed + 202)
            if state.get("gen") is not None:
                gen.set_state(state["gen"])
            bound = teacher_logit_bound(args)
            att_scale = plan["teacher_cfg"].get("attention", {}).get("scale", 1.0 / math.sqrt(cfg["head_dim"]))
            w_max = math.sqrt(bound / (att_scale * cfg["head_dim"])) if bound > 0 else None
            norms = [p for n, p in student.named_parameters() if n.endswith(("q_norm.weight", "k_norm.weight"))]
            trainable = [p for g in groups for p in g["params"]]
            sched = argparse.Namespace(lr=args.stage2_lr, warmup=args.warmup, min_lr_ratio=args.min_lr_ratio)
            while state["step"] < args.stage2_steps:
                for group in opt.param_groups:
                    group["lr"] = learning_rate(sched, state["step"], state["step"] / args.stage2_steps)
                x, y = random_batch(train_stream, args.batch_size, args.seq_len, bos, gen)
                x, y = x.to(device), y.to(device)
                logits = student(x)
                loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
                if args.distill > 0:
                    with torch.no_grad():
                        teacher_logits = teacher(x)
                    loss = (1 - args.distill) * loss + args.distill * transfer.distill_loss(
                        logits, teacher_logits, args.distill_temperature)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if args.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(trainable, args.grad_clip)
                opt.step()
                with torch.no_grad():
                    if w_max is not None:
                        for p in norms:
                            p.clamp_(-w_max, w_max)
                transfer.clamp_gates(student)
                state["step"] += 1
                stopper.step()
                meter.charge("stage2", steps=1, tokens=y.numel(), teacher_tokens=y.numel() if args.distill > 0 else 0)
                if state["step"] % 10 == 0 or state["step"] == 1:
                    state.setdefault("stage2_log", []).append({"step": state["step"], "loss": loss.item()})
                    print("stage2 step %4d  loss %.4f" % (state["step"], loss.item()), flush=True)
                if state["step"] % args.eval_every == 0 or state["step"] == args.stage2_steps:
                    evaluate("stage2", state["step"])
                reason = stopper.reason()
                if reason:
                    return pause(reason, opt, gen)
                if state["step"] % args.save_every == 0:
                    checkpoint(opt, gen)
        state["stage"], state["step"], state["opt"], state["gen"] = "export", 0, None, None
        checkpoint()

    return export(args, plan, state, student, valid_stream, meter)


def export(args, plan, state, student, valid_stream, meter):
    """Writes the checkpoint beside --out and renames it into place: --out holds a whole model or none."""
    transfer.merge_low_rank(student)
    student = student.cpu().float()
    meter.charge("export")
    info = {"converted_from": os.path.abspath(args.teacher), "target": args.target, "attention": plan["cfg"]["attention"],
            "args": vars(args), "teacher_valid": state.get("teacher_valid"), "init": state.get("init"),
            "stage1_note": state.get("stage1_note"), "stage1_log": state.get("stage1_log", []),
            "stage2_log": state.get("stage2_log", []), "history": state["history"], "costs": state["costs"],
            "parameters": sum(p.numel() for p in student.parameters()), "torch": torch.__version__,
            "blas": blas_in_use(), "threads": torch.get_num_threads()}
    partial = "%s.partial-%d" % (args.out.rstrip("/"), os.getpid())
    golden_source = valid_stream if valid_stream is not None else plan["calib_stream"]
    lengths = [int(x) for x in args.golden_lengths.split(",") if x]
    export_checkpoint(student, plan["cfg"], os.path.join(args.teacher, "tokenizer.model"), partial, args.export_dtype,
                      golden_sequences(golden_source, plan["tok"].bos_id, lengths), info,
                      golden_vocab_stride=args.golden_vocab_stride)
    old = None
    if os.path.exists(args.out):  # --force (checked before training)
        old = "%s.old-%d" % (args.out.rstrip("/"), os.getpid())
        os.replace(args.out, old)
    os.replace(partial, args.out)
    if old:
        shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(args.work, ignore_errors=True)
    print("convert: wrote %s" % args.out, flush=True)
    return 0


def _cache(args, text):
    from convert import cache_dir
    return cache_dir(args, text)
