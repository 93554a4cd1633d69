#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention (FlashAttention backend) on the GPU: causal prefill of
the attention part alone at the llama1b shape (32 query heads, 8 kv heads, head_dim 64, bf16), at
8K, 32K and 128K tokens. The baseline `steady bench --device cuda` prefill figures are put beside
(docs/benchmarks.md). Times are CUDA-event medians after a warm-up, on fresh random inputs.

  python3 tools/bench/sdpa_compare.py [--lengths 8192,32768,131072] [--out FILE.json]
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", default="8192,32768,131072")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        sys.exit("sdpa_compare: needs PyTorch (%s)" % e)
    if not torch.cuda.is_available():
        sys.exit("sdpa_compare: no CUDA device")
    rows = []
    for n in [int(x) for x in args.lengths.split(",")]:
        gen = torch.Generator(device="cuda").manual_seed(n)
        shape = lambda h: (1, h, n, args.head_dim)
        q = torch.randn(shape(args.heads), device="cuda", dtype=torch.bfloat16, generator=gen)
        # GQA as the model has it: each kv head serves heads / kv_heads query heads.
        k = torch.randn(shape(args.kv_heads), device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn(shape(args.kv_heads), device="cuda", dtype=torch.bfloat16, generator=gen)
        group = args.heads // args.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        times = []
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, k, v, is_causal=True)  # warm-up
            for _ in range(args.reps):
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
                stop.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(stop) / 1e3)
        times.sort()
        t = times[len(times) // 2]
        flops = 4.0 * args.heads * args.head_dim * n * n / 2  # causal: half of QK^T and PV
        rows.append({"tokens": n, "seconds": t, "tokens_per_second": n / t, "tflops": flops / t / 1e12})
        print("sdpa flash  %7d tokens  %8.3f ms  %12.0f tokens/s  %6.1f TFLOP/s" % (n, 1e3 * t, n / t, flops / t / 1e12))
        del q, k, v
        torch.cuda.empty_cache()
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "heads": args.heads,
              "kv_heads": args.kv_heads, "head_dim": args.head_dim, "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
