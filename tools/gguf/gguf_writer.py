"""A small GGUF (version 3) writer: typed metadata and F32, F16, BF16 and Q8_0 tensors.

Written from the published format (ggml's docs/gguf.md): a header (magic "GGUF", version, tensor
count, metadata count), the metadata key/value pairs, one info record per tensor (name, dimensions
innermost first, ggml type, data offset), zero padding to `general.alignment`, then the tensor data,
each tensor starting at a multiple of the alignment. Everything little-endian.

Tensors are given as numpy arrays in row-major order with PyTorch's shape ([out, in] for a matrix);
GGUF lists dimensions innermost first, so the shape is written reversed. Data is produced one tensor
at a time while writing, so a multi-GB checkpoint is converted without holding it in memory twice.
"""
import os
import struct

import numpy as np

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

# Metadata value types (gguf_metadata_value_type).
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
_SCALAR_FORMAT = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i",
                  FLOAT32: "<f", BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}
_ARRAY_DTYPE = {UINT8: "<u1", INT8: "<i1", UINT16: "<u2", INT16: "<i2", UINT32: "<u4", INT32: "<i4",
                FLOAT32: "<f4", UINT64: "<u8", INT64: "<i8", FLOAT64: "<f8"}

# ggml tensor types used here (ggml_type) and, for each, (elements per block, bytes per block).
GGML_F32, GGML_F16, GGML_Q8_0, GGML_BF16 = 0, 1, 8, 30
TYPE_BY_NAME = {"f32": GGML_F32, "f16": GGML_F16, "q8_0": GGML_Q8_0, "bf16": GGML_BF16}
_BLOCK = {GGML_F32: (1, 4), GGML_F16: (1, 2), GGML_BF16: (1, 2), GGML_Q8_0: (32, 34)}

# general.file_type (llama_ftype) for a file whose matrices are all of one type.
FILE_TYPE = {GGML_F32: 0, GGML_F16: 1, GGML_Q8_0: 7, GGML_BF16: 32}


def _string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _padding(n):
    return (-n) % ALIGNMENT


def to_bf16(x):
    """float32 -> bfloat16 bits (uint16), rounding to nearest even; NaN stays a (quiet) NaN."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    nan = np.isnan(x)
    if nan.any():
        rounded = np.where(nan, (bits >> np.uint32(16)) | np.uint32(0x40), rounded)
    return rounded.astype(np.uint16)


def quantize_q8_0(x):
    """Rows of float32 -> Q8_0 bytes. A block is 32 consecutive values of a row: a float16 scale
    d = max|x| / 127 followed by 32 int8 q = round(x / d) (half away from zero, as C's roundf), the
    reference quantization of ggml (quantize_row_q8_0_ref)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.shape[-1] % 32 != 0:
        raise ValueError(f"q8_0 needs rows that are a multiple of 32 values, got {x.shape[-1]}")
    blocks = x.reshape(-1, 32)
    amax = np.abs(blocks).max(axis=1)
    d = amax / 127.0
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    v = blocks * inv[:, None]
    q = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int8)
    out = np.empty((blocks.shape[0], 34), dtype=np.uint8)
    out[:, 0:2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out


def encode(x, ggml_type):
    """float array -> the bytes of one tensor of ggml_type."""
    if ggml_type == GGML_F32:
        return np.ascontiguousarray(x, dtype="<f4").tobytes()
    if ggml_type == GGML_F16:
        x32 = np.asarray(x, dtype=np.float32)
        if np.isfinite(x32).all() and np.abs(x32).max(initial=0) > 65504:
            raise ValueError("a value is beyond float16's range")
        return np.ascontiguousarray(x32.astype("<f2")).tobytes()
    if ggml_type == GGML_BF16:
        return to_bf16(x).astype("<u2").tobytes()
    if ggml_type == GGML_Q8_0:
        return quantize_q8_0(x).tobytes()
    raise ValueError(f"unsupported ggml type {ggml_type}")


class GGUFWriter:
    """Collects metadata and tensors, then writes the file in one pass (write())."""

    def __init__(self, path):
        self.path = path
        self._kv = []       # encoded key/value records, in order
        self._keys = set()
        self._tensors = []  # (name, shape, ggml_type, nbytes, produce) with produce() -> bytes

    # --- metadata -------------------------------------------------------------------------------
    def add(self, key, value_type, value):
        if key in self._keys:
            raise ValueError(f"metadata key {key!r} given twice")
        self._keys.add(key)
        self._kv.append(_string(key) + struct.pack("<I", value_type) + self._value(value_type, value))

    def add_array(self, key, elem_type, values):
        if key in self._keys:
            raise ValueError(f"metadata key {key!r} given twice")
        self._keys.add(key)
        head = _string(key) + struct.pack("<I", ARRAY) + struct.pack("<IQ", elem_type, len(values))
        if elem_type == STRING:
            body = b"".join(_string(v) for v in values)
        elif elem_type == BOOL:
            body = bytes(1 if v else 0 for v in values)
        else:
            body = np.asarray(values, dtype=_ARRAY_DTYPE[elem_type]).tobytes()
        self._kv.append(head + body)

    def add_uint32(self, key, v):
        self.add(key, UINT32, v)

    def add_float32(self, key, v):
        self.add(key, FLOAT32, v)

    def add_bool(self, key, v):
        self.add(key, BOOL, v)

    def add_string(self, key, v):
        self.add(key, STRING, v)

    @staticmethod
    def _value(value_type, value):
        if value_type == STRING:
            return _string(value)
        return struct.pack(_SCALAR_FORMAT[value_type], value)

    # --- tensors --------------------------------------------------------------------------------
    def add_tensor(self, name, shape, ggml_type, produce):
        """shape: PyTorch order (outermost first); produce(): the float array, called once at write."""
        per_block, block_bytes = _BLOCK[ggml_type]
        if shape[-1] % per_block != 0:
            raise ValueError(f"{name}: rows of {shape[-1]} values are not whole blocks of {per_block}")
        count = int(np.prod(shape, dtype=np.int64))
        self._tensors.append((name, tuple(int(s) for s in shape), ggml_type, count // per_block * block_bytes, produce))

    # --- output ---------------------------------------------------------------------------------
    def write(self):
        if "general.alignment" not in self._keys:
            self.add_uint32("general.alignment", ALIGNMENT)
        infos, offset = [], 0
        for name, shape, ggml_type, nbytes, _ in self._tensors:
            dims = shape[::-1]  # innermost first
            infos.append(_string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims) +
                         struct.pack("<IQ", ggml_type, offset))
            offset += nbytes + _padding(nbytes)
        head = GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(self._tensors), len(self._kv))
        head += b"".join(self._kv) + b"".join(infos)
        head += b"\0" * _padding(len(head))

        tmp = f"{self.path}.tmp.{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                f.write(head)
                for name, shape, ggml_type, nbytes, produce in self._tensors:
                    x = np.asarray(produce(), dtype=np.float32)
                    if x.shape != shape:
                        raise ValueError(f"{name}: produced shape {x.shape}, declared {shape}")
                    data = encode(x, ggml_type)
                    assert len(data) == nbytes, (name, len(data), nbytes)
                    f.write(data)
                    f.write(b"\0" * _padding(nbytes))
            os.replace(tmp, self.path)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
