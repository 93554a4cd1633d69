"""Converts a softmax checkpoint into a constant-state one the engine serves (docs/conversion.md).

  /usr/bin/python3 tools/train/convert.py --teacher models/tiny-softmax --target dark --param features=64 \\
      --train corpus-data/train.txt --valid corpus-data/valid.txt \\
      --stage1-steps 200 --stage2-steps 150 --export-dtype F16 --out models/tiny-softmax-to-dark

Targets: dark (M initialized from calibration statistics, then trained), performer (dark with M = I,
the same features and seed), lfk (dark's projections learned, M = I), slay, taylor, sliding_window,
window_dark (a window plus a dark state over the tokens it evicts); --layer N=NAME[,key=value...]
gives layer N another mechanism (per-layer mixes). Stages, each optional:
  stage 1 (--stage1-steps): attention transfer: only the mechanisms' own parameters train, to match
          the teacher's per-layer attention outputs (mean squared error) on calibration text;
  stage 2 (--stage2-steps): a finetune with the language-model loss, all weights or low-rank
          adapters (--finetune lora), optionally distilling the teacher's logits (--distill).

Exit status: 0 exported; 2 refused (bad input, found before any training; nothing written);
75 paused (--max-seconds, --stop-after-steps or SIGINT/SIGTERM): the state is in --work, and the same
command resumes from it (--restart starts clean). The model directory appears whole or not at all.
"""
import argparse
import json
import math
import os
import shutil
import signal
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data import Tokenizer, sha16, token_stream  # noqa: E402
from model import layer_attention  # noqa: E402

EXIT_REFUSED, EXIT_PAUSED = 2, 75
STATE_VERSION = 1
# Targets: name -> (the config mechanism, dark_mode, keys the logit scale applies to)
TARGETS = {"dark": ("dark", None), "performer": ("dark", "performer"), "lfk": ("dark", "lfk"),
           "slay": ("slay", None), "taylor": ("taylor", None), "sliding_window": ("sliding_window", None),
           "window_dark": ("window_dark", None)}
# What the engine accepts (model/mechanisms/*.cc ParseParams): key -> (kind, low, high); None: head_dim.
ENGINE_PARAMS = {
    "dark": {"scale": (float, 1e-6, 1e6), "features": (int, 1, 1 << 16), "rank": (int, 1, None),
             "delta": (float, 0, 1)},
    "slay": {"nodes": (int, 1, 8), "anchors": (int, 1, 4096), "features": (int, 1, 4096), "eps": (float, 1e-9, 1e3),
             "delta": (float, 0, 1)},
    "taylor": {"scale": (float, 1e-6, 1e6), "order": (int, 1, 8)},
    "sliding_window": {"scale": (float, 1e-6, 1e6), "window": (int, 1, 1 << 24)},
    "window_dark": {"scale": (float, 1e-6, 1e6), "window": (int, 1, 1 << 24), "features": (int, 1, 1 << 16),
                    "rank": (int, 1, None)},
}
REQUIRED = {"sliding_window": ("window",), "window_dark": ("window",)}
ENGINE_MECHANISMS = ("softmax", "taylor", "slay", "dark", "sliced_relu", "sliced_relu_bump", "sliding_window",
                     "window_dark")
TAYLOR_MAX_FEATURES = 1 << 20


class Refused(Exception):
    """Bad input, found before any training starts."""


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--teacher", required=True, help="softmax checkpoint directory")
    ap.add_argument("--target", required=True, help=", ".join(TARGETS))
    ap.add_argument("--param", action="append", default=[], help="key=value mechanism parameter (JSON value)")
    ap.add_argument("--layer", action="append", default=[], help="N=NAME[,key=value...]: layer N's mechanism")
    ap.add_argument("--train", help="training text for stage 2 (and, by default, the calibration text)")
    ap.add_argument("--calib", help="calibration text for the statistics and stage 1 (default --train)")
    ap.add_argument("--calib-tokens", type=int, default=0, help="use the first N calibration tokens (0: all)")
    ap.add_argument("--min-calib-tokens", type=int, help="refuse shorter calibration text (default 16 x seq-len)")
    ap.add_argument("--valid", help="validation text (never trained on)")
    ap.add_argument("--out", required=True, help="checkpoint directory to write")
    ap.add_argument("--work", help="resumable state (default OUT.convert)")
    ap.add_argument("--force", action="store_true", help="replace an existing --out")
    ap.add_argument("--restart", action="store_true", help="discard a saved state and start clean")
    ap.add_argument("--seed", type=int, default=1, help="features (dark, slay), batches, adapters")
    ap.add_argument("--dark-init", default="identity", choices=["identity", "proposal", "whiten"],
                    help="dark's M from the calibration statistics (docs/conversion.md)")
    ap.add_argument("--dark-clip", type=float, default=0.4, help="proposal: clip Lambda's eigenvalues here (< 0.5)")
    ap.add_argument("--stats-batches", type=int, default=8, help="calibration batches for the statistics")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--stage1-steps", type=int, default=0)
    ap.add_argument("--stage1-lr", type=float, default=1e-2)
    ap.add_argument("--stage1-batch", type=int, default=8)
    ap.add_argument("--stage2-steps", type=int, default=0)
    ap.add_argument("--stage2-lr", type=float, default=1e-3)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--finetune", default="full", choices=["full", "lora"])
    ap.add_argument("--lora-rank", type=int, default=8)
    ap.add_argument("--lora-alpha", type=float, default=16.0)
    ap.add_argument("--lora-mlp", action="store_true", help="adapters on the MLP too (default: q, k, v, o)")
    ap.add_argument("--distill", type=float, default=0.0, help="weight of the teacher-logit KL term (0: off)")
    ap.add_argument("--distill-temperature", type=float, default=1.0)
    ap.add_argument("--logit-bound", type=float, help="QK-norm clamp in stage 2 (default: the teacher's, else off)")
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--eval-tokens", type=int, default=16384)
    ap.add_argument("--save-every", type=int, default=25)
    ap.add_argument("--max-seconds", type=float, default=0, help="pause (exit 75) after this much time")
    ap.add_argument("--stop-after-steps", type=int, default=0, help="pause after this many steps (tests)")
    ap.add_argument("--export-dtype", default="F32", choices=["F32", "F16", "BF16"])
    ap.add_argument("--golden-lengths", default="1,16,100")
    ap.add_argument("--golden-vocab-stride", type=int, default=1, help="golden logits of every Nth token id")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--cache-dir", help="token stream cache (default: next to the text)")
    args = ap.parse_args(argv)
    args.work = args.work or args.out.rstrip("/") + ".convert"
    return args


def parse_value(text):
    try:
        return json.loads(text)
    except ValueError:
        return text


def check_params(name, params, head_dim, where):
    """Refuses what the engine would refuse for this mechanism, naming the key."""
    if name in ENGINE_MECHANISMS and name not in ENGINE_PARAMS:
        raise Refused("%s: the engine runs %s, but the converter has no way to it from softmax weights (its "
                      "scores come from projections that would have to be trained from scratch); convertible: %s"
                      % (where, name, ", ".join(TARGETS)))
    if name not in ENGINE_PARAMS:
        raise Refused("%s: the engine cannot run mechanism %r as a conversion target (engine mechanisms: %s; "
                      "convertible: %s)" % (where, name, ", ".join(ENGINE_MECHANISMS), ", ".join(TARGETS)))
    allowed = ENGINE_PARAMS[name]
    for key in REQUIRED.get(name, ()):
        if key not in params:
            raise Refused("%s: %s needs %r (e.g. --param %s=64)" % (where, name, key, key))
    for key, value in params.items():
        if key not in allowed:
            raise Refused("%s: %s has no parameter %r (accepted: %s)" % (where, name, key, ", ".join(allowed)))
        kind, lo, hi = allowed[key]
        hi = head_dim if hi is None else hi
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if kind is int and not isinstance(value, int):
            ok = False
        if not ok or not lo <= value <= hi:
            raise Refused("%s: %s.%s = %r: the engine takes %s in [%s, %s]" % (where, name, key, value, kind.__name__,
                                                                          lo, hi))
    if name == "taylor":
        order = params.get("order", 4)
        rows = sum(math.comb(head_dim + p - 1, p) for p in range(order))
        if rows > TAYLOR_MAX_FEATURES:
            raise Refused("%s: taylor order %d with head_dim %d needs %d feature rows per kv head; the engine "
                          "stops at %d" % (where, order, head_dim, rows, TAYLOR_MAX_FEATURES))


def with_scale(name, params, scale):
    """The mechanism's parameters with the teacher's logit scale, and dark's feature count written out
    (its default differs between dark, 256, and window_dark, 64: the config says which)."""
    out = dict(params)
    if name in ("dark", "taylor", "sliding_window", "window_dark"):
        out.setdefault("scale", scale)
    if name in ("dark", "window_dark"):
        out.setdefault("features", 256 if name == "dark" else 64)
    return out


def student_config(teacher_cfg, args):
    """config.json of the converted model, and dark's mode; Refused for a target the engine cannot run."""
    if args.target == "softmax":
        raise Refused("--target softmax: the teacher is softmax already (and its KV cache grows)")
    if args.target not in TARGETS:
        check_params(args.target, {}, teacher_cfg["head_dim"], "--target")  # names the engine's list
    name, dark_mode = TARGETS[args.target]
    d = teacher_cfg["head_dim"]
    scale = teacher_cfg.get("attention", {}).get("scale", 1.0 / math.sqrt(d))
    params = {}
    for kv in args.param:
        if "=" not in kv:
            raise Refused("--param %r: expected key=value" % kv)
        key, value = kv.split("=", 1)
        params[key] = parse_value(value)
    if dark_mode == "performer" and params.get("rank", d) != d:
        raise Refused("--target performer: M is the identity, so rank must be head_dim (%d)" % d)
    attention = with_scale(name, params, scale)
    check_params(name, attention, d, "--target %s" % args.target)
    attention["mechanism"] = name
    layers = {}
    for spec in args.layer:
        index, _, rest = spec.partition("=")
        if not index.isdigit() or int(index) >= teacher_cfg["num_hidden_layers"]:
            raise Refused("--layer %r: %r is not a layer index below %d" % (spec, index,
                                                                            teacher_cfg["num_hidden_layers"]))
        parts = rest.split(",")
        lname, lparams = parts[0], {}
        for kv in parts[1:]:
            key, _, value = kv.partition("=")
            lparams[key] = parse_value(value)
        if lname == "softmax":
            raise Refused("--layer %s: softmax keeps a growing KV cache; a conversion target has constant state" % spec)
        lparams = with_scale(lname, lparams, scale)
        check_params(lname, lparams, d, "--layer %s" % spec)
        layers[index] = dict(lparams, mechanism=lname)
    if layers:
        attention["layers"] = layers
    cfg = json.loads(json.dumps(teacher_cfg))
    cfg["attention"] = attention
    return cfg, dark_mode


def check_inputs(args):
    """Everything that can be refused, before anything trains or is written. Returns the plan."""
    for f in ("config.json", "model.safetensors", "tokenizer.model"):
        if not os.path.isfile(os.path.join(args.teacher, f)):
            raise Refused("--teacher %s: no %s (a Steady checkpoint directory: docs/checkpoint-format.md)"
                          % (args.teacher, f))
    with open(os.path.join(args.teacher, "config.json")) as f:
        teacher_cfg = json.load(f)
    for i in range(teacher_cfg.get("num_hidden_layers", 0)):
        mech = layer_attention(teacher_cfg, i)["mechanism"]
        if mech != "softmax":
            raise Refused("--teacher %s: layer %d's attention is %s, not softmax; conversion starts from a "
                          "softmax model" % (args.teacher, i, mech))
    cfg, dark_mode = student_config(teacher_cfg, args)
    if args.stage2_steps > 0 and not args.train:
        raise Refused("--stage2-steps %d needs --train (the finetuning text)" % args.stage2_steps)
    calib = args.calib or args.train
    if not calib:
        raise Refused("no calibration text: give --calib or --train")
    for flag, path in (("--calib", calib), ("--train", args.train), ("--valid", args.valid)):
        if path and not os.path.isfile(path):
            raise Refused("%s %s: no such file" % (flag, path))
    if args.valid and sha16(args.valid) == sha16(calib):
        raise Refused("--calib %s is the validation text: calibrating on it would leave no held-out figure" % calib)
    if os.path.exists(args.out) and not args.force:
        raise Refused("--out %s exists (pass --force to replace it)" % args.out)
    if args.dark_clip >= 0.5 or args.dark_clip <= 0:
        raise Refused("--dark-clip %g: must be in (0, 0.5) for (I - 2 Lambda) to stay positive" % args.dark_clip)
    tok = Tokenizer(os.path.join(args.teacher, "tokenizer.model"))
    calib_stream = token_stream(calib, tok, cache_dir(args, calib))
    if args.calib_tokens:
        calib_stream = calib_stream[:args.calib_tokens]
    need = args.min_calib_tokens or 16 * args.seq_len
    need = max(need, args.stage1_batch * args.seq_len + 1, args.stats_batches and args.seq_len + 1)
    if len(calib_stream) < need:
        raise Refused("calibration text %s: %d tokens%s; the conversion needs at least %d (16 sequences of "
                      "--seq-len %d; --min-calib-tokens changes it)" % (
                          calib, len(calib_stream), " (after --calib-tokens)" if args.calib_tokens else "", need,
                          args.seq_len))
    return {"teacher_cfg": teacher_cfg, "cfg": cfg, "dark_mode": dark_mode, "tok": tok, "calib": calib,
            "calib_stream": calib_stream}


def cache_dir(args, text):
    if args.cache_dir:
        return args.cache_dir
    folder = os.path.dirname(os.path.abspath(text))
    return os.path.join(folder, ".token-cache") if os.access(folder, os.W_OK) else None


def fingerprint(args, plan):
    """What makes a saved state this conversion's: the teacher's bytes and every argument that changes
    the result (not where it goes, nor how long one invocation may run)."""
    skip = {"out", "work", "force", "restart", "max_seconds", "stop_after_steps", "threads", "cache_dir",
            "export_dtype", "golden_lengths", "golden_vocab_stride", "eval_every", "eval_tokens", "save_every"}
    keyed = {k: v for k, v in sorted(vars(args).items()) if k not in skip}
    keyed["teacher_weights"] = sha16(os.path.join(args.teacher, "model.safetensors"))
    keyed["calib_sha"] = sha16(plan["calib"])
    return keyed


# ---- the resumable state (--work/state.pt) ----

def save_state(work, state):
    """Atomically: a temp file, fsync, rename; the previous state is kept as state.prev.pt."""
    os.makedirs(work, exist_ok=True)
    path, tmp = os.path.join(work, "state.pt"), os.path.join(work, "state.pt.tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    if os.path.exists(path):
        os.replace(path, os.path.join(work, "state.prev.pt"))
    os.replace(tmp, path)


def load_state(work, key):
    """The saved state, its predecessor if the last is unreadable, or None (start clean). A state of a
    different conversion is refused rather than overwritten."""
    for name in ("state.pt", "state.prev.pt"):
        path = os.path.join(work, name)
        if not os.path.exists(path):
            continue
        try:
            state = torch.load(path, map_location="cpu")
        except Exception as e:  # unreadable (truncated by a crash): try the previous one
            print("convert: %s is unreadable (%s); trying the one before" % (path, e), file=sys.stderr)
            continue
        if state.get("version") != STATE_VERSION or state.get("key") != key:
            diff = sorted(k for k in set(key) | set(state.get("key", {}))
                          if key.get(k) != state.get("key", {}).get(k))
            raise Refused("--work %s holds another conversion's state (differs in: %s); pass --restart to "
                          "discard it or choose another --work" % (work, ", ".join(diff) or "version"))
        return state
    return None


class Stopper:
    """Decides when this invocation pauses: a signal, --max-seconds or --stop-after-steps."""

    def __init__(self, args):
        self.args, self.start, self.steps, self.signal = args, time.time(), 0, None
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, frame):
        self.signal = signal.Signals(signum).name

    def step(self):
        self.steps += 1

    def reason(self):
        a = self.args
        if self.signal:
            return self.signal
        if a.max_seconds and time.time() - self.start >= a.max_seconds:
            return "--max-seconds %g" % a.max_seconds
        if a.stop_after_steps and self.steps >= a.stop_after_steps:
            return "--stop-after-steps %d" % a.stop_after_steps
        return None


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        plan = check_inputs(args)
        if args.restart and os.path.isdir(args.work):
            shutil.rmtree(args.work)
        key = fingerprint(args, plan)
        state = load_state(args.work, key)
    except Refused as e:
        print("convert: refused: %s" % e, file=sys.stderr)
        return EXIT_REFUSED
    from convert_run import run
    return run(args, plan, key, state)


if __name__ == "__main__":
    sys.exit(main())
