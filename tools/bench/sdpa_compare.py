#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on the GPU (the FlashAttention backend): causal prefill of
one layer's attention at the llama1b shape (32 query heads, 8 kv heads, head_dim 64, bf16) at 8K, 32K
and 128K tokens, the baseline `steady bench --device cuda --prefill-tokens ...` puts its layer-0
attention beside (tools/bench/gpu_report.py). CUDA-event medians after a warm-up, on fresh random
inputs. --device cpu (the dry run, tests/cli/gpu_dry_run.sh): the math backend in fp32, short lengths.

  python3 tools/bench/sdpa_compare.py [--lengths 8192,32768,131072] [--reps 5] [--device cuda|cpu]
                                      [--out FILE.json]
"""
import argparse
import json
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", default="8192,32768,131072")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        sys.exit("sdpa_compare: needs PyTorch (%s)" % e)
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # PyTorch before 2.2 (Debian's, for the dry run): plain attention on the CPU
        SDPBackend = sdpa_kernel = None
    cuda = args.device == "cuda"
    if cuda and (not torch.cuda.is_available() or sdpa_kernel is None):
        sys.exit("sdpa_compare: needs a CUDA device and PyTorch >= 2.2 (torch %s)" % torch.__version__)
    dtype = torch.bfloat16 if cuda else torch.float32
    backend_name = "flash" if cuda else ("math" if sdpa_kernel else "plain")

    def attention(q, k, v):
        if sdpa_kernel is None:
            n = q.shape[2]
            s = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
            return torch.softmax(s, dim=-1) @ v
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION if cuda else SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def timed(fn):
        if cuda:
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            torch.cuda.synchronize()
            return start.elapsed_time(stop) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    rows = []
    for n in [int(x) for x in args.lengths.split(",")]:
        gen = torch.Generator(device=args.device).manual_seed(n)
        shape = lambda h: (1, h, n, args.head_dim)
        q = torch.randn(shape(args.heads), device=args.device, dtype=dtype, generator=gen)
        # GQA as the model has it: each kv head serves heads / kv_heads query heads.
        k = torch.randn(shape(args.kv_heads), device=args.device, dtype=dtype, generator=gen)
        v = torch.randn(shape(args.kv_heads), device=args.device, dtype=dtype, generator=gen)
        group = args.heads // args.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        run = lambda: attention(q, k, v)
        run()  # warm-up
        times = sorted(timed(run) for _ in range(args.reps))
        t = times[len(times) // 2]
        flops = 4.0 * args.heads * args.head_dim * n * n / 2  # causal: half of QK^T and PV
        rows.append({"tokens": n, "seconds": t, "tokens_per_second": n / t, "tflops": flops / t / 1e12})
        print("sdpa %s  %7d tokens  %8.3f ms  %12.0f tokens/s  %6.1f TFLOP/s" % (
            backend_name, n, 1e3 * t, n / t, flops / t / 1e12), flush=True)
        del q, k, v
        if cuda:
            torch.cuda.empty_cache()
    report = {"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
              "backend": backend_name, "dtype": str(dtype).replace("torch.", ""), "heads": args.heads,
              "kv_heads": args.kv_heads, "head_dim": args.head_dim, "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
    print("%d lengths: %s" % (len(rows), ", ".join("%d: %.3f ms" % (r["tokens"], 1e3 * r["seconds"]) for r in rows)))


if __name__ == "__main__":
    main()
