#!/usr/bin/python3
"""Smoke test of the trainer (tools/train) and the corpus helpers (tools/corpus).

  /usr/bin/python3 tests/train/smoke_test.py [--seconds 10] [--keep DIR]

- the trainer's parallel mechanisms equal token-by-token recurrent forms written from MECHANISMS.md
  (tests/train/reference.py), in fp64, with GQA;
- where a `steady` binary is found ($STEADY_BIN, else build/bin/steady), they also equal the engine's
  recurrent form (`steady attn --form recurrent`) on the same q, k, v and mechanism tensors;
- a tiny model per mechanism (softmax, slay, dark, sliced_relu) trains for --seconds on CPU on
  /usr/share/common-licenses/GPL-3 with tests/data/tokenizer/tokenizer.model, and its loss falls;
- the export holds exactly the tensors and shapes the engine expects (listed independently of the
  PyTorch modules), contiguous and 8-byte aligned, config.json, tokenizer.model and a golden file;
  the tensors read back equal the trained ones, and the reloaded model reproduces the golden logits;
- safetensors dtypes round-trip; the corpus's sentence splitter and split are deterministic.

Exits non-zero on any failure; the last line is "N passed, M failed" (skipped checks, e.g. the
engine comparison without a binary, are listed as SKIP and counted in neither).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import traceback

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools", "train"))
sys.path.insert(0, os.path.join(REPO, "tools", "corpus"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import export  # noqa: E402
import mechanisms  # noqa: E402
import reference  # noqa: E402
import train as trainer  # noqa: E402
from model import SteadyLM, expected_tensors  # noqa: E402

TEXT = "/usr/share/common-licenses/GPL-3"
VALID_TEXT = "/usr/share/common-licenses/Apache-2.0"
TOKENIZER = os.path.join(REPO, "tests", "data", "tokenizer", "tokenizer.model")

results = []


def check(name, fn):
    try:
        detail = fn()
        if detail and detail.startswith("skipped"):
            results.append((name, None))
            print("SKIP %s: %s" % (name, detail), flush=True)
            return
        results.append((name, True))
        print("PASS %s%s" % (name, ": " + detail if detail else ""), flush=True)
    except Exception as e:  # a test failure of any kind is reported, and the next test runs
        results.append((name, False))
        print("FAIL %s: %s" % (name, e), flush=True)
        traceback.print_exc(limit=3)


def qkv(heads, kv_heads, t, d, seed, magnitude=1.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(heads, t, d, generator=g, dtype=torch.float64) * magnitude
    k = torch.randn(kv_heads, t, d, generator=g, dtype=torch.float64) * magnitude
    v = torch.randn(kv_heads, t, d, generator=g, dtype=torch.float64)
    return q, k, v


def run_parallel(mech, q, k, v):
    return mech(q[None], k[None], v[None])[0]


def max_diff(a, b):
    return (a - b).abs().max().item()


# ---- mechanisms: parallel (trainer) == recurrent (reference) ----

def test_softmax():
    q, k, v = qkv(4, 2, 12, 8, 1)
    mech = mechanisms.make_mechanism("softmax", 8, 2, {"scale": 0.3}, 0)
    err = max_diff(run_parallel(mech, q, k, v), reference.softmax(q, k, v, 0.3))
    assert err < 1e-12, "max diff %.3g" % err
    return "max diff %.1e" % err


def test_taylor():
    q, k, v = qkv(4, 2, 10, 4, 2, magnitude=0.7)
    for order in (2, 3, 4):
        mech = mechanisms.make_mechanism("taylor", 4, 2, {"scale": 0.5, "order": order}, 0)
        err = max_diff(run_parallel(mech, q, k, v), reference.taylor(q, k, v, 0.5, order))
        assert err < 1e-10, "order %d: max diff %.3g" % (order, err)
    return "orders 2-4 max diff %.1e" % err


def test_slay():
    q, k, v = qkv(4, 2, 9, 8, 3, magnitude=2.0)
    mech = mechanisms.make_mechanism("slay", 8, 2, {"nodes": 2, "anchors": 4, "features": 5}, 7)
    t = mech.tensors
    t.double()
    ref = reference.slay(q, k, v, t.anchors, t.omega, mech.node_s, mech.node_w)
    err = max_diff(run_parallel(mech, q, k, v), ref)
    assert err < 1e-10, "max diff %.3g" % err
    # Gauss-Laguerre nodes for C = 2.001, R = 2, as tabulated in MECHANISMS.md.
    assert abs(mech.node_s[0] - 0.29274685) < 1e-8 and abs(mech.node_w[1] - 0.07318671) < 1e-8
    return "max diff %.1e" % err


def test_dark(performer=False):
    q, k, v = qkv(4, 2, 11, 8, 4)
    mech = mechanisms.make_mechanism("performer" if performer else "dark", 8, 2,
                                     {"scale": 0.35, "features": 24, "rank": 8}, 5)
    t = mech.tensors
    with torch.no_grad():
        t.double()
        if not performer:  # a learned-looking M, not the identity
            t.M.add_(0.2 * torch.randn(t.M.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64))
    err = max_diff(run_parallel(mech, q, k, v), reference.dark(q, k, v, t.M, t.G, 0.35))
    assert err < 1e-10, "max diff %.3g" % err
    if performer:
        assert torch.equal(t.M[0], torch.eye(8, dtype=torch.float64)) and not t.M.requires_grad
    return "max diff %.1e" % err


def test_chunked_forms():
    """slay, dark, performer: the chunked training form (T > CHUNK) computes the quadratic form's function,
    also at logits large enough that dark's running-max references change within and across chunks."""
    worst = 0.0
    for name, params in (("slay", {"nodes": 2, "anchors": 4, "features": 5}),
                         ("dark", {"scale": 0.35, "features": 24}), ("performer", {"scale": 0.35, "features": 24})):
        for t, magnitude in ((mechanisms.CHUNK * 3 + 5, 1.0), (mechanisms.CHUNK * 2 + 1, 6.0)):
            mech = mechanisms.make_mechanism(name, 8, 2, params, 5)
            mech.tensors.double()
            if name == "dark":
                with torch.no_grad():
                    mech.tensors.M.add_(0.2 * torch.randn(mech.tensors.M.shape, dtype=torch.float64,
                                                          generator=torch.Generator().manual_seed(2)))
            q, k, v = qkv(4, 2, t, 8, 12, magnitude)
            chunked = run_parallel(mech, q, k, v)
            mech.quadratic = True
            quadratic = run_parallel(mech, q, k, v)
            err = max_diff(chunked, quadratic)
            assert err < 1e-10, "%s T=%d |x|~%.0f: max diff %.3g" % (name, t, magnitude, err)
            worst = max(worst, err)
    return "max diff %.1e" % worst


def test_sliced():
    q, k, v = qkv(4, 2, 13, 8, 8)
    mech = mechanisms.make_mechanism("sliced_relu", 8, 2, {}, 9, heads=4)
    mech.tensors.double()
    mech.record_scores = True
    y = run_parallel(mech, q, k, v)
    zq, zk = (z[0] for z in mech.last_scores)
    assert zq.shape == (4, 13) and zk.shape == (2, 13)
    err = max_diff(y, reference.sliced_relu(zq, zk, v))
    assert err < 1e-10, "max diff %.3g" % err
    # All keys equal to the query score: 0/0 is defined as 0 (and the gradient stays finite).
    z = torch.zeros(1, 2, 5, dtype=torch.float64, requires_grad=True)
    mech2 = mechanisms.make_mechanism("sliced_relu", 8, 2, {}, 9, heads=2)
    mech2.tensors.double()
    mech2.tensors.scores = lambda side, x: z.expand(1, 2, 5)
    out = mech2(q[None, :2, :5], k[None, :, :5], v[None, :, :5])
    out.sum().backward()
    assert torch.equal(out, torch.zeros_like(out)) and torch.isfinite(z.grad).all()
    return "max diff %.1e" % err


def test_dark_stable():
    """Large logits: the stabilized parallel form stays finite and equals itself on shifted keys."""
    q, k, v = qkv(2, 2, 16, 8, 6, magnitude=12.0)
    mech = mechanisms.make_mechanism("dark", 8, 2, {"scale": 1.0, "features": 32}, 3)
    mech.tensors.double()
    y = run_parallel(mech, q.float(), k.float(), v.float())
    assert torch.isfinite(y).all(), "non-finite output at large logits"
    y64 = run_parallel(mech, q, k, v)
    assert torch.isfinite(y64).all()
    return "finite at |q|,|k| ~ %.0f" % (12 * math.sqrt(8))


# ---- mechanisms: trainer == engine (`steady attn`) ----

def steady_binary():
    for path in (os.environ.get("STEADY_BIN"), os.path.join(REPO, "build", "bin", "steady")):
        if path and os.access(path, os.X_OK):
            return path
    return None


def test_engine(tmp):
    binary = steady_binary()
    if binary is None:
        return "skipped (no steady binary; set STEADY_BIN)"
    h, t, d = 2, 13, 8
    q, k, v = qkv(h, h, t, d, 8)
    report = []
    cases = [("softmax", {"scale": 0.3}, []), ("taylor", {"scale": 0.3, "order": 3}, ["--order", "3"]),
             ("slay", {"nodes": 2, "anchors": 4, "features": 6}, ["--param", "anchors=4", "--param", "features=6"]),
             ("dark", {"scale": 0.3, "features": 20}, ["--param", "features=20"])]
    for name, params, flags in cases:
        mech = mechanisms.make_mechanism(name, d, h, params, 11)
        tensors = {"q": q, "k": k, "v": v}
        if mech.tensors is not None:
            with torch.no_grad():
                mech.tensors.double()
                if name == "dark":
                    mech.tensors.M.add_(0.1 * torch.randn(mech.tensors.M.shape, dtype=torch.float64,
                                                          generator=torch.Generator().manual_seed(2)))
            for tname, tv in mech.tensors.state_dict().items():
                tensors["%s.%s" % (mech.tensor_name, tname)] = tv.float().double()
                getattr(mech.tensors, tname).data = tv.float().double()  # the engine reads F32 tensors
        in_path, out_path = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
        export.write_safetensors(in_path, {n: (x.float() if "." in n else x) for n, x in tensors.items()})
        cmd = [binary, "attn", "--mechanism", name, "--in", in_path, "--out", out_path, "--form", "recurrent"]
        if "scale" in params:
            cmd += ["--scale", repr(params["scale"])]
        run = subprocess.run(cmd + flags, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert run.returncode == 0, "%s: %s" % (" ".join(cmd), run.stderr.decode().strip())
        y_engine = export.read_safetensors(out_path)[0]["y"]
        err = max_diff(run_parallel(mech, q, k, v), y_engine)
        # The engine rounds derived tensors to fp32 (dark W = G M, renormalized slay anchors).
        assert err < 1e-6, "%s: trainer vs engine recurrent max diff %.3g" % (name, err)
        report.append("%s %.0e" % (name, err))
    return "vs %s: %s" % (binary, ", ".join(report))


def test_sliding_window_engine(tmp):
    """The engine's sliding window (`steady attn`, all three forms) against PyTorch's own attention
    (multi_head_attention_forward with identity projections: Debian's torch 1.13 has no public SDPA)
    with Hugging Face Mistral's mask (key j visible from query i when i - W < j <= i), at windows
    shorter than, equal to and longer than the sequence."""
    binary = steady_binary()
    if binary is None:
        return "skipped (no steady binary; set STEADY_BIN)"
    h, t, d, scale = 3, 40, 8, 0.35
    q, k, v = qkv(h, h, t, d, 12)
    report = []
    for window in (1, 7, 40, 64):
        i = torch.arange(t)[:, None]
        j = torch.arange(t)[None, :]
        hidden = (j > i) | (j <= i - window)  # True: not attended
        eye = torch.eye(h * d, dtype=torch.float64)
        flat = lambda x: x.permute(1, 0, 2).reshape(t, 1, h * d)  # [t, batch 1, heads * d], head-major
        # torch divides q.k by sqrt(d): the engine's scale s is given as q * s * sqrt(d).
        out, _ = torch.nn.functional.multi_head_attention_forward(
            flat(q) * scale * math.sqrt(d), flat(k), flat(v), h * d, h, torch.cat([eye, eye, eye]),
            torch.zeros(3 * h * d, dtype=torch.float64), None, None, False, 0.0, eye,
            torch.zeros(h * d, dtype=torch.float64), training=False, need_weights=False, attn_mask=hidden)
        want = out.reshape(t, h, d).permute(1, 0, 2)
        in_path, out_path = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
        export.write_safetensors(in_path, {"q": q, "k": k, "v": v})
        for form in ("recurrent", "chunked", "parallel"):
            cmd = [binary, "attn", "--mechanism", "sliding_window", "--param", "window=%d" % window,
                   "--scale", repr(scale), "--chunk-size", "5", "--in", in_path, "--out", out_path, "--form", form]
            run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            assert run.returncode == 0, "%s: %s" % (" ".join(cmd), run.stderr.decode().strip())
            err = max_diff(export.read_safetensors(out_path)[0]["y"], want)
            assert err < 1e-12, "W %d %s: engine vs torch max diff %.3g" % (window, form, err)
            report.append(err)
    return "W 1, 7, 40, 64, three forms each: max diff %.1e vs torch %s" % (max(report), torch.__version__)


# ---- training and export ----

def read_header(path):
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + n]), n, len(data)


def train_and_check(mechanism, tmp, seconds):
    out = os.path.join(tmp, "ckpt-" + mechanism)
    args = trainer.parse_args(["--train", TEXT, "--valid", VALID_TEXT, "--tokenizer", TOKENIZER, "--out", out,
                               "--mechanism", mechanism, "--preset", "smoke", "--seq-len", "64", "--batch-size", "8",
                               "--time-budget", str(seconds), "--warmup", "10", "--lr", "3e-3", "--log-every", "1000",
                               "--cache-dir", os.path.join(tmp, "cache"), "--golden-lengths", "1,9,70",
                               "--slay-anchors", "4", "--slay-features", "8", "--dark-features", "64"])
    info, model = trainer.train(args)

    # Loss falls.
    first, final = info["first_loss"], info["final_train_loss"]
    assert final < first - 0.5, "loss %.3f -> %.3f in %d steps" % (first, final, info["steps"])
    assert info["valid_loss"] < math.log(model.cfg["vocab_size"]), "valid loss %.3f" % info["valid_loss"]

    # config.json: what the engine parses.
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta", "tie_word_embeddings",
                "bos_token_id", "eos_token_id", "qk_norm", "attention"):
        assert key in cfg, "config.json lacks %s" % key
    assert cfg["attention"]["mechanism"] == ("dark" if mechanism == "performer" else mechanism)
    if mechanism == "sliced_relu":  # a measured bucketed range per layer
        ranges = cfg["attention"]["layers"]
        assert sorted(ranges) == [str(i) for i in range(cfg["num_hidden_layers"])], ranges
        assert all(r["z_min"] < r["z_max"] for r in ranges.values()), ranges

    # model.safetensors: exactly the expected names and shapes, F32, contiguous, header 8-aligned.
    header, n, size = read_header(os.path.join(out, "model.safetensors"))
    assert n % 8 == 0, "header length %d not a multiple of 8" % n
    names = {k: v["shape"] for k, v in header.items() if k != "__metadata__"}
    expected = expected_tensors(cfg)
    assert names == expected, "tensor names/shapes differ: extra %s, missing %s" % (
        sorted(set(names) - set(expected))[:4], sorted(set(expected) - set(names))[:4])
    spans = sorted(v["data_offsets"] for k, v in header.items() if k != "__metadata__")
    assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:])), "gaps between tensors"
    assert spans[-1][1] == size - 8 - n, "data section size %d, last offset %d" % (size - 8 - n, spans[-1][1])
    assert all(v["dtype"] == "F32" for k, v in header.items() if k != "__metadata__")

    # The tensors read back are the trained ones, bit for bit.
    tensors, meta = export.read_safetensors(os.path.join(out, "model.safetensors"))
    trained = model.checkpoint_tensors()
    for name, t in trained.items():
        assert torch.equal(tensors[name], t.detach().float().cpu()), "%s differs after export" % name
    assert meta.get("format") == "pt"

    # tokenizer.model shipped; golden file present and reproduced by the reloaded checkpoint and by the
    # trained model itself.
    with open(os.path.join(out, "tokenizer.model"), "rb") as a, open(TOKENIZER, "rb") as b:
        assert a.read() == b.read(), "tokenizer.model differs from the training tokenizer"
    golden, gmeta = export.read_safetensors(os.path.join(out, "golden.safetensors"))
    assert gmeta.get("format") == "steady-golden" and gmeta.get("sequences") == "3"
    worst, count = export.check_golden(out)
    assert count == 3 and worst < 1e-5, "reloaded checkpoint vs golden: %.3g over %d sequences" % (worst, count)
    model.eval()
    with torch.no_grad():
        for i in range(3):
            ids = golden["golden.%d.tokens" % i]
            assert ids.dtype == torch.int32 and ids[0].item() == cfg["bos_token_id"]
            logits = golden["golden.%d.logits" % i]
            assert list(logits.shape) == [len(ids), cfg["vocab_size"]]
            err = max_diff(model(ids.long()[None])[0].double(), logits.double())
            assert err < 1e-3, "trained model (fp32) vs golden: %.3g" % err
    return "%d steps, loss %.2f -> %.2f, valid %.2f, %d tok/s, golden %.1e" % (
        info["steps"], first, final, info["valid_loss"], info["tokens_per_second"], worst)


def test_safetensors_dtypes(tmp):
    path = os.path.join(tmp, "dtypes.safetensors")
    src = {"a": torch.randn(3, 5), "b": torch.randn(7).to(torch.bfloat16), "c": torch.randn(2, 2).half(),
           "d": torch.arange(5, dtype=torch.int32), "e": torch.randn(1, dtype=torch.float64)}
    export.write_safetensors(path, src, {"x": 1})
    back, meta = export.read_safetensors(path)
    for k, t in src.items():
        assert back[k].dtype == t.dtype and torch.equal(back[k], t), k
    assert meta == {"x": "1"}
    header, n, _ = read_header(path)
    assert n % 8 == 0 and header["b"]["dtype"] == "BF16"


def test_logit_bound():
    """With QK-norm and the clamp train.py applies, |scale q.k| stays within --logit-bound."""
    cfg = {"vocab_size": 32, "hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 1,
           "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-5,
           "qk_norm": True, "tie_word_embeddings": True, "attention": {"mechanism": "softmax", "scale": 0.25}}
    model = SteadyLM(cfg)
    w_max = math.sqrt(4.0 / (0.25 * 16))
    attn = model.model.layers[0].self_attn
    with torch.no_grad():
        attn.q_norm.weight.fill_(3.0).clamp_(-w_max, w_max)
        attn.k_norm.weight.fill_(-3.0).clamp_(-w_max, w_max)
    x = torch.randn(5, 32) * 10
    q = attn.q_norm(attn.q_proj(x).view(5, 2, 16))
    k = attn.k_norm(attn.k_proj(x).view(5, 2, 16))
    logits = 0.25 * torch.einsum("thd,shd->hts", q, k)
    assert logits.abs().max().item() <= 4.0 + 1e-5, logits.abs().max().item()


def test_corpus_helpers():
    import sentences
    import split_corpus
    long_line = ("word " * 3000).strip()
    pieces = [p for s in sentences.split_sentences(long_line + ". Next one.") for p in sentences.cut(s, 4000)]
    assert all(len(p.encode()) <= 4000 for p in pieces) and pieces[-1] == "Next one."
    assert list(sentences.split_sentences("Mr. Smith left. He came back.")) == ["Mr. Smith left.", "He came back."]
    assert split_corpus.normalize("austen", "A  line\nwrapped here.\n\n  Indented\tverse\n") == \
        "A line wrapped here.\nIndented verse"
    picks = [split_corpus.is_valid("sotu", "doc%d" % i, 500) for i in range(2000)]
    assert picks == [split_corpus.is_valid("sotu", "doc%d" % i, 500) for i in range(2000)]
    assert 60 < sum(picks) < 140, "%d of 2000 in validation" % sum(picks)


def test_cli_tokenizer():
    """The spm_encode fallback gives the Python module's ids on single-line documents."""
    import data
    if shutil.which("spm_encode") is None:
        return "skipped (no spm_encode)"
    tok = data.Tokenizer(TOKENIZER)
    if tok.sp is None:
        return "skipped (no sentencepiece module to compare with)"
    cli = data.Tokenizer.__new__(data.Tokenizer)
    cli.path, cli.sp = TOKENIZER, None
    cli._cli_info()
    docs = ["This License applies to any program.", "  Two  spaces,\tand a tab; digits 12345."]
    assert cli.encode_documents(docs) == tok.encode_documents(docs)
    assert (cli.vocab_size, cli.bos_id, cli.eos_id) == (tok.vocab_size, tok.bos_id, tok.eos_id)
    return None


def main():
    ap = argparse.ArgumentParser(description="Trainer smoke test")
    ap.add_argument("--seconds", type=float, default=10, help="training time per mechanism")
    ap.add_argument("--keep", help="write the checkpoints here instead of a temp dir")
    args = ap.parse_args()
    torch.set_num_threads(1)
    tmp = args.keep or tempfile.mkdtemp(prefix="steady-train-test-")
    os.makedirs(tmp, exist_ok=True)
    try:
        check("softmax parallel == recurrent", test_softmax)
        check("taylor parallel == recurrent state", test_taylor)
        check("slay parallel == recurrent", test_slay)
        check("dark parallel == recurrent", test_dark)
        check("performer parallel == recurrent, M = I frozen", lambda: test_dark(performer=True))
        check("dark stabilization at large logits", test_dark_stable)
        check("slay/dark/performer chunked form == quadratic form", test_chunked_forms)
        check("sliced_relu parallel == sorted prefix sums, 0/0 -> 0", test_sliced)
        check("trainer mechanisms == engine recurrent form", lambda: test_engine(tmp))
        check("sliding window: engine == torch attention with Mistral's mask", lambda: test_sliding_window_engine(tmp))
        check("safetensors dtypes round-trip", lambda: test_safetensors_dtypes(tmp))
        check("QK-norm clamp bounds the logits", test_logit_bound)
        check("corpus sentence splitter and split", test_corpus_helpers)
        check("spm_encode fallback matches the Python module", test_cli_tokenizer)
        for mechanism in ("softmax", "slay", "dark", "sliced_relu"):
            check("train + export + golden: %s" % mechanism, lambda m=mechanism: train_and_check(m, tmp, args.seconds))
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    finish()


def finish():
    """Prints "N passed, M failed" (skipped checks counted in neither) and exits non-zero on a failure."""
    passed = sum(1 for _, ok in results if ok)
    failed = sum(1 for _, ok in results if ok is False)
    skipped = len(results) - passed - failed
    if skipped:
        print("(%d skipped)" % skipped)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
