"""GGUF test files quantized by ggml itself, with ggml's own dequantization beside them.

Loads libggml-base from npm's @node-llama-cpp/linux-x64 (Python ctypes), quantizes random rows to
each type with ggml_quantize_chunk, writes them as one GGUF file with tools/gguf/gguf_writer.py, and
writes, for each tensor, what ggml's dequantize_row_* (or ggml_fp16/bf16_to_fp32_row) gives back as
raw little-endian fp32 (NAME.f32). tests/cli/gguf_llamacpp.sh compares them with
`steady gguf-info FILE --tensor NAME --out ...` byte for byte. It also reads the file back with
ggml's own GGUF reader (gguf_init_from_file) and prints each tensor's type and offset as ggml sees
them (ggml_tensors.txt), so that the test can hold Steady's tensor table against ggml's. For the
types in REQUANTIZED the file also holds fp32 rows and ggml's quantization of them, which the test
passes through Steady's own quantizer (`steady gguf-info --requantize`).

  ggml_reference.py --lib BINS_DIR --out DIR
"""
import argparse
import ctypes
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "tools", "gguf"))
import gguf_writer  # noqa: E402

# ggml_type numbers and block sizes (ggml-common.h).
TYPES = {  # name: (ggml_type, values per block, bytes per block, ggml's dequantizer)
    "F32": (0, 1, 4, None),
    "F16": (1, 1, 2, "ggml_fp16_to_fp32_row"),
    "BF16": (30, 1, 2, "ggml_bf16_to_fp32_row"),
    "Q8_0": (8, 32, 34, "dequantize_row_q8_0"),
    "Q4_0": (2, 32, 18, "dequantize_row_q4_0"),
    "Q4_1": (3, 32, 20, "dequantize_row_q4_1"),
    "Q5_0": (6, 32, 22, "dequantize_row_q5_0"),
    "Q5_1": (7, 32, 24, "dequantize_row_q5_1"),
    "Q4_K": (12, 256, 144, "dequantize_row_q4_K"),
    "Q5_K": (13, 256, 176, "dequantize_row_q5_K"),
    "Q6_K": (14, 256, 210, "dequantize_row_q6_K"),
    "Q2_K": (10, 256, 84, "dequantize_row_q2_K"),
    "Q3_K": (11, 256, 110, "dequantize_row_q3_K"),
    "IQ4_NL": (20, 32, 18, "dequantize_row_iq4_nl"),
    "IQ4_XS": (23, 256, 136, "dequantize_row_iq4_xs"),
}

# Types whose quantizer Steady has too (its --cpu-weights name): ggml's and Steady's must agree.
REQUANTIZED = {"Q4_0": "q4", "Q4_K": "q4k"}


def load(lib_dir):
    for name in ("libggml-base.so", "libggml.v0.5.0.so", "libggml.so"):
        path = os.path.join(lib_dir, name)
        if os.path.exists(path):
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    ggml = ctypes.CDLL(os.path.join(lib_dir, "libggml-base.so"))
    ggml.ggml_quantize_chunk.restype = ctypes.c_size_t
    ggml.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                         ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    for _, _, _, fn in TYPES.values():
        if fn:
            getattr(ggml, fn).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
            getattr(ggml, fn).restype = None
    return ggml


def rows(rng, n_rows, n_cols, kind):
    """Test values: gaussian rows at several scales, an all-zero row, a row with one outlier."""
    x = rng.standard_normal((n_rows, n_cols)).astype(np.float32)
    x *= np.float32(10.0) ** rng.integers(-3, 2, size=(n_rows, 1)).astype(np.float32)
    x[0] = 0.0
    if n_rows > 2:
        x[1, 7] = 40.0
        x[2] = np.abs(x[2])  # all positive: K-quant mins at zero
    if kind == "F32":
        x[3, :4] = [np.inf, -np.inf, 1e-45, -0.0]
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    ggml = load(args.lib)
    rng = np.random.default_rng(29)

    raw = {}  # name -> the quantized bytes ggml produced

    def encode(x, ggml_type):
        for kind, (t, per_block, block_bytes, _) in TYPES.items():
            if t == ggml_type and kind not in ("F32", "F16", "BF16"):
                src = np.ascontiguousarray(x, dtype=np.float32)
                dst = np.zeros(src.size // per_block * block_bytes, dtype=np.uint8)
                n = ggml.ggml_quantize_chunk(t, src.ctypes.data, dst.ctypes.data, 0, src.shape[0], src.shape[1], None)
                assert n == dst.size, (kind, n, dst.size)
                return dst.tobytes()
        return original_encode(x, ggml_type)

    # The writer knows F32/F16/BF16/Q8_0; the other types' bytes come from ggml (its own quantizer).
    original_encode = gguf_writer.encode
    gguf_writer.encode = encode
    for kind, (t, per_block, block_bytes, _) in TYPES.items():
        gguf_writer._BLOCK.setdefault(t, (per_block, block_bytes))

    path = os.path.join(args.out, "types.gguf")
    w = gguf_writer.GGUFWriter(path)
    w.add_string("general.architecture", "llama")
    w.add_string("general.name", "ggml reference types")
    w.add("test.int8", gguf_writer.INT8, -7)
    w.add("test.float64", gguf_writer.FLOAT64, 0.25)
    w.add_bool("test.bool", True)
    w.add_array("test.strings", gguf_writer.STRING, ["a", "b\"c", ""])
    w.add_array("test.floats", gguf_writer.FLOAT32, [0.5, -1.0])
    values = {}  # tensor name -> the fp32 rows it was made from
    for kind in TYPES:
        n_rows, n_cols = (6, 512) if TYPES[kind][1] == 256 else (5, 96)
        x = rows(rng, n_rows, n_cols, kind)
        values[f"t.{kind}"] = x
        w.add_tensor(f"t.{kind}", x.shape, TYPES[kind][0], lambda x=x: x)
    # For `steady gguf-info --requantize`: fp32 rows (src.KIND) beside ggml's own quantization of
    # them (q.KIND), for the types Steady's --cpu-weights quantizers claim to reproduce.
    for kind in REQUANTIZED:
        x = rows(rng, 64, 1024, kind)
        x[3] = np.float32(0.75)  # every value equal: a sub-block whose max is its min
        x[4] *= np.float32(1e-6)  # scales in fp16's subnormal range
        x[5, ::3] = 0.0
        for name, t in ((f"src.{kind}", TYPES["F32"][0]), (f"q.{kind}", TYPES[kind][0])):
            values[name] = x
            w.add_tensor(name, x.shape, t, lambda x=x: x)
    w.write()

    # ggml's dequantization of the bytes in the file (read back from it, so the test compares what
    # Steady reads with what ggml makes of the same bytes).
    class Params(ctypes.Structure):
        _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]
    ggml.gguf_init_from_file.restype = ctypes.c_void_p
    ggml.gguf_init_from_file.argtypes = [ctypes.c_char_p, Params]
    ctx = ggml.gguf_init_from_file(path.encode(), Params(True, None))
    if not ctx:
        sys.exit("ggml's gguf_init_from_file refused the file")
    ggml.gguf_get_n_tensors.restype = ctypes.c_int64
    ggml.gguf_get_n_tensors.argtypes = [ctypes.c_void_p]
    ggml.gguf_get_data_offset.restype = ctypes.c_size_t
    ggml.gguf_get_data_offset.argtypes = [ctypes.c_void_p]
    ggml.gguf_get_tensor_name.restype = ctypes.c_char_p
    ggml.gguf_get_tensor_name.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    ggml.gguf_get_tensor_offset.restype = ctypes.c_size_t
    ggml.gguf_get_tensor_offset.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    ggml.gguf_get_tensor_type.restype = ctypes.c_int
    ggml.gguf_get_tensor_type.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    data_offset = ggml.gguf_get_data_offset(ctx)
    blob = open(path, "rb").read()
    names = {t: k for k, (t, *_rest) in TYPES.items()}
    with open(os.path.join(args.out, "ggml_tensors.txt"), "w") as listing:
        for i in range(ggml.gguf_get_n_tensors(ctx)):
            name = ggml.gguf_get_tensor_name(ctx, i).decode()
            t = ggml.gguf_get_tensor_type(ctx, i)
            offset = ggml.gguf_get_tensor_offset(ctx, i)
            listing.write(f"{name} {names[t]} {offset}\n")
            kind = names[t]
            _, per_block, block_bytes, fn = TYPES[kind]
            n = values[name].size
            start = data_offset + offset
            src = np.frombuffer(blob, dtype=np.uint8, count=n // per_block * block_bytes, offset=start).copy()
            out = np.zeros(n, dtype=np.float32)
            if fn is None:
                out[:] = src.view("<f4")
            else:
                getattr(ggml, fn)(src.ctypes.data, out.ctypes.data, n)
            out.astype("<f4").tofile(os.path.join(args.out, f"{name}.f32"))
    print(f"wrote {path} and {ggml.gguf_get_n_tensors(ctx)} reference tensors (data at byte {data_offset})")


if __name__ == "__main__":
    main()
