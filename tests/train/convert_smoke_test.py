#!/usr/bin/python3
"""Smoke test of the softmax-to-constant-state conversion (tools/train/convert.py, docs/conversion.md).

  /usr/bin/python3 tests/train/convert_smoke_test.py [--keep DIR]

- the trainer's window_dark against PyTorch's own attention (multi_head_attention_forward): with its
  gates at 0 it is softmax under Mistral's sliding-window mask, with a window longer than the sequence
  it is causal softmax; and, where a `steady` binary is found ($STEADY_BIN, else build/bin/steady),
  against the engine's three forms (`steady attn --mechanism window_dark`) with a learned-looking M
  and unequal gates;
- dark's data-aligned initialization: on Gaussian inputs of known covariance, Sigma's eigenvalues are
  DARKFormer's (1 + 2 lambda) / (1 - 2 lambda) of the measured Lambda;
- bad input is refused with exit status 2 before anything is written: a teacher that is not softmax,
  a target the engine cannot run, window_dark without its window, a parameter out of the engine's
  range, too little calibration text, calibrating on the validation text;
- a conversion of the shipped models/tiny-softmax to window_dark (a few steps of stage 1 and of a
  low-rank stage 2) pauses (exit 75, no model written), resumes from its state to the same result as
  an uninterrupted run, exports exactly the tensors the engine expects, and the golden logits are
  reproduced by the reloaded checkpoint and by the engine (`steady logits`) where a binary is found;
- export.py's --store-as rewrites that checkpoint in F32 exactly, with the same golden logits.

Exits non-zero on any failure; the last line is "N passed, M failed" (as tests/train/smoke_test.py).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools", "train"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import export  # noqa: E402
import mechanisms  # noqa: E402
import transfer  # noqa: E402
from model import expected_tensors  # noqa: E402
from smoke_test import check, finish, max_diff, qkv, steady_binary  # noqa: E402

TEACHER = os.path.join(REPO, "models", "tiny-softmax")
CONVERT = os.path.join(REPO, "tools", "train", "convert.py")
TEXT = "/usr/share/common-licenses/GPL-3"
VALID_TEXT = "/usr/share/common-licenses/Apache-2.0"


def torch_attention(q, k, v, scale, hidden):
    """PyTorch's multi-head attention with identity projections; hidden [T, T] True = not attended."""
    h, t, d = q.shape
    eye = torch.eye(h * d, dtype=torch.float64)
    flat = lambda x: x.permute(1, 0, 2).reshape(t, 1, h * d)
    out, _ = torch.nn.functional.multi_head_attention_forward(
        flat(q) * scale * math.sqrt(d), flat(k), flat(v), h * d, h, torch.cat([eye, eye, eye]),
        torch.zeros(3 * h * d, dtype=torch.float64), None, None, False, 0.0, eye,
        torch.zeros(h * d, dtype=torch.float64), training=False, need_weights=False, attn_mask=hidden)
    return out.reshape(t, h, d).permute(1, 0, 2)


def window_dark(h, d, window, features, seed):
    mech = mechanisms.make_mechanism("window_dark", d, h, {"scale": 0.35, "window": window, "features": features},
                                     seed, heads=h)
    mech.tensors.double()
    return mech


def test_window_dark_limits():
    h, t, d = 3, 30, 8
    q, k, v = qkv(h, h, t, d, 21)
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    errs = []
    for window in (1, 6):
        mech = window_dark(h, d, window, 16, 3)
        with torch.no_grad():
            mech.tensors.gate.zero_()
        want = torch_attention(q, k, v, 0.35, (j > i) | (j <= i - window))
        errs.append(max_diff(mech(q[None], k[None], v[None])[0], want))
    mech = window_dark(h, d, t, 16, 3)  # nothing is ever evicted: causal softmax, whatever the gate
    with torch.no_grad():
        mech.tensors.gate.fill_(2.5)
    errs.append(max_diff(mech(q[None], k[None], v[None])[0], torch_attention(q, k, v, 0.35, j > i)))
    assert max(errs) < 1e-12, "window_dark vs torch attention: max diff %.3g" % max(errs)
    return "gate 0 (W 1, 6) and W = T vs torch %s: max diff %.1e" % (torch.__version__, max(errs))


def test_window_dark_engine(tmp):
    binary = steady_binary()
    if binary is None:
        return "skipped (no steady binary; set STEADY_BIN)"
    h, t, d = 2, 23, 8
    q, k, v = qkv(h, h, t, d, 22)
    g = torch.Generator().manual_seed(5)
    worst = 0.0
    for window, features in ((1, 12), (5, 20), (40, 8)):
        mech = window_dark(h, d, window, features, 7)
        with torch.no_grad():
            mech.tensors.M.add_(0.2 * torch.randn(mech.tensors.M.shape, dtype=torch.float64, generator=g))
            mech.tensors.gate.copy_(torch.tensor([0.3, 1.7], dtype=torch.float64))
            for p in (mech.tensors.M, mech.tensors.G):
                p.copy_(p.float().double())  # the engine reads F32 tensors
        tensors = {"q": q, "k": k, "v": v, "dark.M": mech.tensors.M.detach().float(),
                   "dark.G": mech.tensors.G.detach().float(), "dark.gate": mech.tensors.gate.detach().float()}
        in_path, out_path = os.path.join(tmp, "wd_in.safetensors"), os.path.join(tmp, "wd_out.safetensors")
        export.write_safetensors(in_path, tensors)
        want = mech(q[None], k[None], v[None])[0].detach()
        for form in ("recurrent", "chunked", "parallel"):
            cmd = [binary, "attn", "--mechanism", "window_dark", "--param", "window=%d" % window, "--scale", "0.35",
                   "--chunk-size", "4", "--in", in_path, "--out", out_path, "--form", form]
            run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            assert run.returncode == 0, "%s: %s" % (" ".join(cmd), run.stderr.decode().strip())
            err = max_diff(export.read_safetensors(out_path)[0]["y"], want)
            # The engine forms W = G M in fp32.
            assert err < 1e-6, "W %d %s: trainer vs engine max diff %.3g" % (window, form, err)
            worst = max(worst, err)
    return "W 1, 5, 40, three forms each, vs %s: max diff %.1e" % (binary, worst)


def test_dark_init():
    d, n = 6, 200000
    g = torch.Generator().manual_seed(9)
    lam_true = torch.tensor([0.02, 0.05, 0.1, 0.2, 0.3, 0.45], dtype=torch.float64)
    basis, _ = torch.linalg.qr(torch.randn(d, d, dtype=torch.float64, generator=g))
    x = torch.randn(n, d, dtype=torch.float64, generator=g) * (2 * lam_true).sqrt() @ basis.T  # E[xx^T] = 2 Lambda
    lam = (x.T @ x / n / 2)[None]
    M, info = transfer.dark_init(lam, "proposal", clip=0.4)
    evals = torch.linalg.eigvalsh(lam[0]).clamp_max(0.4)
    want = (1 + 2 * evals) / (1 - 2 * evals)
    got = torch.linalg.eigvalsh(M[0] @ M[0].T)
    err = (got - want).abs().max().item()
    assert err < 1e-9, "Sigma's eigenvalues: max diff %.3g" % err
    assert info["clipped"] == 1, info
    identity, _ = transfer.dark_init(lam, "identity")
    assert torch.equal(identity[0], torch.eye(d, dtype=torch.float64))
    return "Sigma = (I + 2 Lambda)(I - 2 Lambda)^-1, eigenvalues within %.0e, 1 clipped at 0.4" % err


def convert(args, **kw):
    return subprocess.run([sys.executable, CONVERT] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, **kw)


def base_args(tmp, out):
    return ["--teacher", TEACHER, "--target", "window_dark", "--param", "window=8", "--param", "features=16",
            "--train", TEXT, "--valid", VALID_TEXT, "--seq-len", "32", "--stage1-batch", "4", "--batch-size", "4",
            "--stage1-steps", "3", "--stage2-steps", "3", "--finetune", "lora", "--dark-init", "proposal",
            "--stats-batches", "2", "--eval-tokens", "512", "--eval-every", "3", "--golden-lengths", "1,40",
            "--golden-vocab-stride", "16", "--export-dtype", "BF16", "--cache-dir", os.path.join(tmp, "cache"),
            "--out", out]


def test_refusals(tmp):
    out = os.path.join(tmp, "refused")
    cases = [
        (["--teacher", os.path.join(REPO, "models", "tiny-dark")], "not softmax"),
        (["--target", "sliced_relu"], "no way to it from softmax"),
        (["--target", "nonesuch"], "cannot run mechanism"),
        (["--target", "softmax"], "softmax already"),
        (["--param", "window=0"], "window_dark.window = 0"),
        (["--param", "bogus=1"], "no parameter 'bogus'"),
        (["--calib-tokens", "100"], "the conversion needs at least"),
        (["--calib", VALID_TEXT], "is the validation text"),
    ]
    for extra, expect in cases:
        args = base_args(tmp, out) + extra
        run = convert(args)
        assert run.returncode == 2, "%s: exit %d, want 2\n%s" % (extra, run.returncode, run.stderr[-2000:])
        assert expect in run.stderr, "%s: %r not in %r" % (extra, expect, run.stderr)
        assert not os.path.exists(out) and not os.path.exists(out + ".convert"), "%s: wrote something" % extra
    no_window = [a for a in base_args(tmp, out) if a != "window=8"]
    no_window.remove("--param")
    run = convert(no_window)
    assert run.returncode == 2 and "needs 'window'" in run.stderr, run.stderr
    return "%d cases, exit 2, nothing written" % (len(cases) + 1)


def tensors_of(path):
    return export.read_safetensors(os.path.join(path, "model.safetensors"))[0]


def test_convert_resume(tmp):
    whole, paused = os.path.join(tmp, "whole"), os.path.join(tmp, "paused")
    run = convert(base_args(tmp, whole))
    assert run.returncode == 0, run.stderr[-3000:]
    first = convert(base_args(tmp, paused) + ["--stop-after-steps", "2"])
    assert first.returncode == 75, "exit %d, want 75 (paused)\n%s" % (first.returncode, first.stderr[-3000:])
    assert not os.path.exists(paused), "a paused conversion wrote its model"
    again = convert(base_args(tmp, paused) + ["--stop-after-steps", "3"])  # pauses again in stage 2
    assert again.returncode == 75 and "resuming" in again.stdout, again.stdout[-2000:] + again.stderr[-2000:]
    last = convert(base_args(tmp, paused))
    assert last.returncode == 0 and "resuming" in last.stdout, last.stderr[-3000:]
    assert not os.path.exists(paused + ".convert"), "the state is left behind"
    a, b = tensors_of(whole), tensors_of(paused)
    diff = max((a[n].double() - b[n].double()).abs().max().item() for n in a)
    assert a.keys() == b.keys() and diff == 0, "resumed != uninterrupted: max diff %.3g" % diff
    with open(os.path.join(whole, "config.json")) as f:
        cfg = json.load(f)
    att = cfg["attention"]
    assert att["mechanism"] == "window_dark" and att["window"] == 8 and att["features"] == 16, att
    want = expected_tensors(cfg)
    got = {n: list(t.shape) for n, t in a.items()}
    assert got == want, "tensors: extra %s, missing %s" % (sorted(set(got) - set(want))[:4],
                                                           sorted(set(want) - set(got))[:4])
    teacher = tensors_of(TEACHER)
    # Exported in BF16: a tensor the conversion left alone is the teacher's rounded to BF16.
    moved = [n for n in teacher if not torch.equal(teacher[n].bfloat16().double(), a[n].double())]
    assert any("q_proj" in n for n in moved), "the low-rank finetune changed no projection"
    assert not any("embed_tokens" in n or "mlp" in n for n in moved), "lora on attention moved %s" % moved[:3]
    worst, count = export.check_golden(whole)
    assert count == 2 and worst < 1e-5, "reloaded checkpoint vs golden: %.3g over %d" % (worst, count)
    with open(os.path.join(whole, "training.json")) as f:
        info = json.load(f)
    for stage in ("statistics", "stage1", "stage2"):
        assert stage in info["costs"], "training.json costs lack %s: %s" % (stage, info["costs"].keys())
    assert info["costs"]["stage1"]["steps"] == 3 and info["costs"]["stage2"]["steps"] == 3, info["costs"]
    return "resumed == uninterrupted (bitwise), %d tensors as the engine expects, golden %.1e" % (len(a), worst)


def test_engine_golden(tmp):
    binary = steady_binary()
    if binary is None:
        return "skipped (no steady binary; set STEADY_BIN)"
    model = os.path.join(tmp, "whole")
    golden = export.read_safetensors(os.path.join(model, "golden.safetensors"))[0]
    worst = 0.0
    for i in range(2):
        ids = golden["golden.%d.tokens" % i].tolist()
        vocab = golden["golden.%d.vocab" % i].long()
        want = golden["golden.%d.logits" % i].double()
        out = os.path.join(tmp, "logits.bin")
        # --cpu-weights stored: fp32 arithmetic on the exported (bf16) weights, as the golden's; the
        # default would round the activations to bf16 for them.
        run = subprocess.run([binary, "logits", "--model", model, "--ids", ",".join(map(str, ids)), "--out", out,
                              "--cpu-weights", "stored"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        assert run.returncode == 0, run.stderr
        with open(out, "rb") as f:
            got = torch.frombuffer(bytearray(f.read()), dtype=torch.float32).double().reshape(len(ids), -1)
        os.remove(out)
        rel = ((got[:, vocab] - want).abs().max() / want.abs().max()).item()
        worst = max(worst, rel)
    assert worst < 1e-4, "engine vs golden: max rel. error %.3g (window 8 < 40 tokens: the dark state is used)" % worst
    return "window 8 over 40 tokens, max rel. error %.1e" % worst


def test_store_as(tmp):
    """export.py --store-as: the weights in another dtype, the golden recomputed for the same tokens and
    vocabulary columns. BF16 -> F32 is exact, so the new golden equals the old one."""
    whole, wide = os.path.join(tmp, "whole"), os.path.join(tmp, "whole-f32")
    export.store_as(whole, wide, "F32")
    a, b = tensors_of(whole), tensors_of(wide)
    assert a.keys() == b.keys() and all(b[n].dtype == torch.float32 for n in b), "not all F32"
    assert all(torch.equal(a[n].double(), b[n].double()) for n in a), "BF16 -> F32 changed a value"
    old = export.read_safetensors(os.path.join(whole, "golden.safetensors"))[0]
    new, meta = export.read_safetensors(os.path.join(wide, "golden.safetensors"))
    assert old.keys() == new.keys() and meta["weights_dtype"] == "F32", (sorted(new)[:4], meta)
    diff = max((old[n].double() - new[n].double()).abs().max().item() for n in old)
    assert diff == 0, "golden of the same weights differs by %.3g" % diff
    with open(os.path.join(wide, "training.json")) as f:
        assert json.load(f)["stored_as"] == {"dtype": "F32", "from": "BF16"}
    try:
        export.store_as(whole, wide, "BF16")
        raise AssertionError("store_as over an existing directory")
    except ValueError:
        pass
    shutil.rmtree(wide)
    return "BF16 -> F32 exact, golden equal, an existing --out refused"


def main():
    ap = argparse.ArgumentParser(description="Conversion smoke test")
    ap.add_argument("--keep", help="write the conversions here instead of a temp dir")
    args = ap.parse_args()
    torch.set_num_threads(1)
    tmp = args.keep or tempfile.mkdtemp(prefix="steady-convert-test-")
    os.makedirs(tmp, exist_ok=True)
    try:
        check("window_dark == torch attention at its limits", test_window_dark_limits)
        check("window_dark: trainer == engine, three forms", lambda: test_window_dark_engine(tmp))
        check("dark's data-aligned init (the proposal's Sigma)", test_dark_init)
        check("bad input refused before training", lambda: test_refusals(tmp))
        check("convert, pause, resume, export", lambda: test_convert_resume(tmp))
        check("engine reproduces the converted golden", lambda: test_engine_golden(tmp))
        check("export.py --store-as", lambda: test_store_as(tmp))
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
