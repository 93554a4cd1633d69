#!/usr/bin/python3
"""Quantizes a GGUF file with llama.cpp's own quantizer (llama_model_quantize from npm's
@node-llama-cpp/linux-x64, through Python ctypes), as llama.cpp's `llama-quantize IN OUT TYPE` would:
the same per-tensor choices of the mixtures (Q4_K_M keeps some tensors in Q6_K, ...), the same block
arithmetic. For the GGUF checks of tools/bench/peer_llamacpp.sh (docs/gguf.md).

    /usr/bin/python3 tools/gguf/quantize_llamacpp.py --lib BINS_DIR --in model.f32.gguf --out model.q4_k_m.gguf --type q4_k_m

--type f32 turns a quantized file back into f32 with llama.cpp's own dequantization. The input is
usually tools/gguf/steady_to_gguf.py's f32 file. K-quants want rows that are whole
256-value blocks (tools/checkpoints/random_hf.py --size quant); llama.cpp quantizes other rows to a
fallback type.
"""
import argparse
import ctypes
import os
import sys

# llama_ftype (llama.h): the names llama-quantize takes.
FTYPES = {"f32": 0, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9, "q2_k": 10, "q3_k_s": 11, "q3_k_m": 12, "q3_k_l": 13,
          "q4_k_s": 14, "q4_k_m": 15, "q5_k_s": 16, "q5_k_m": 17, "q6_k": 18, "iq4_nl": 25, "iq4_xs": 30}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True, help="the folder of libllama and libggml (npm's @node-llama-cpp/linux-x64 bins)")
    ap.add_argument("--in", dest="inp", required=True, help="GGUF file to quantize (f32 or f16)")
    ap.add_argument("--out", required=True, help="GGUF file to write")
    ap.add_argument("--type", required=True, choices=sorted(FTYPES))
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()

    # libggml-base, then libggml (which loads the CPU backends), then libllama, all global: each
    # resolves symbols of the one before.
    for name in ("libggml-base.so", "libggml.v0.5.0.so", "libggml.so"):
        path = os.path.join(a.lib, name)
        if os.path.exists(path):
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    llama_path = next((os.path.join(a.lib, n) for n in ("libllama.v0.5.0.so", "libllama.so")
                       if os.path.exists(os.path.join(a.lib, n))), None)
    if llama_path is None:
        sys.exit(f"{a.lib}: no libllama")
    llama = ctypes.CDLL(llama_path, mode=ctypes.RTLD_GLOBAL)
    llama.llama_backend_init()
    # llama_model_quantize_params comes back by value through a hidden pointer: a buffer larger than
    # the struct, then nthread (offset 0) and ftype (offset 4) set in it.
    params = ctypes.create_string_buffer(512)
    llama.llama_model_quantize_default_params.restype = None
    llama.llama_model_quantize_default_params.argtypes = [ctypes.c_void_p]
    llama.llama_model_quantize_default_params(params)
    ctypes.c_int32.from_buffer(params, 0).value = a.threads
    ctypes.c_int32.from_buffer(params, 4).value = FTYPES[a.type]
    # allow_requantize (offset 16): a quantized input is dequantized with ggml's own code first; to f32
    # that is llama.cpp's dequantization of the whole file.
    ctypes.c_bool.from_buffer(params, 16).value = True
    llama.llama_model_quantize.restype = ctypes.c_uint32
    llama.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p]
    rc = llama.llama_model_quantize(a.inp.encode(), a.out.encode(), params)
    if rc != 0:
        sys.exit(f"llama_model_quantize({a.inp}, {a.type}) failed: {rc}")
    print(f"{a.out}: {a.type}, {os.path.getsize(a.out)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
