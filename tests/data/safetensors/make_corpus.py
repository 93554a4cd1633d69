#!/usr/bin/env python3
"""Writes the safetensors test corpus (standard library only; the output is committed).

  malformed/<what_is_wrong>.safetensors  files the reader must refuse with a clean error
  valid/<name>.safetensors               files it must accept (fuzzer seeds too)

valid/mixed_dtypes.safetensors is also written by tests/model/checkpoint/safetensors_test.cc with WriteSafeTensors,
which must produce the same bytes: keep the two in step. Inputs found by the fuzzer
(tests/fuzz/safetensors_fuzz.cc) are added here, minimized, with a comment saying so.

Usage: python3 tests/data/safetensors/make_corpus.py
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def pack(header, data=b"", pad=True):
    """8-byte little-endian length, header bytes, data. `header` is a dict, str or bytes."""
    if isinstance(header, dict):
        header = json.dumps(header, separators=(",", ":"))
    if isinstance(header, str):
        header = header.encode("utf-8")
    if pad:
        header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + data


def f32(*values):
    return struct.pack("<%df" % len(values), *values)


def bf16(*values):
    out = b""
    for v in values:
        (x,) = struct.unpack("<I", struct.pack("<f", v))
        x = (x + 0x7FFF + ((x >> 16) & 1)) >> 16  # round to nearest even (finite inputs only)
        out += struct.pack("<H", x)
    return out


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def mixed_dtypes():
    """The file WriteSafeTensors writes in SafetensorsCorpus.WriterMatchesCommittedFile."""
    a = [i * 0.25 - 1.0 for i in range(6)]
    b = [0.1, 1.0 / 3.0, -65504.0, 1e-7]
    c = [1.5, -2.0, 0.1, 3.0e38]
    d = [2.718281828459045]
    data = [
        ("a", "F32", [2, 3], f32(*a)),
        ("b", "F16", [4], struct.pack("<4e", *b)),
        ("c", "BF16", [2, 2], bf16(*c)),
        ("d", "F64", [], struct.pack("<d", *d)),
        ("e", "F32", [0, 3], b""),
    ]
    header = {"__metadata__": {"format": "pt", "source": "make_corpus.py"}}
    blob, offset = b"", 0
    for name, dtype, shape, raw in data:
        header[name] = entry(dtype, shape, offset, offset + len(raw))
        blob += raw
        offset += len(raw)
    return pack(header, blob)


def valid_files():
    return {
        "mixed_dtypes": mixed_dtypes(),
        # Header length 27, not a multiple of 8: the data starts unaligned.
        "unaligned_data": pack('{"x":' + json.dumps(entry("F64", [2], 0, 16), separators=(",", ":")) + "}",
                               struct.pack("<2d", 1.25, -3.5), pad=False),
        "empty_header_object": pack("{}"),
        "integer_dtypes": pack({"i": entry("I32", [2], 0, 8), "u": entry("U8", [3], 8, 11),
                                "z": entry("BOOL", [1], 11, 12)},
                               struct.pack("<2i", -7, 9) + bytes([1, 2, 3, 1])),
        "nonfinite_values": pack({"n": entry("F32", [3], 0, 12)}, f32(1.0, float("inf"), float("nan"))),
    }


def malformed_files():
    one = entry("F32", [2], 0, 8)  # a correct tensor entry over 8 bytes of data
    data8 = f32(1.0, 2.0)
    return {
        "empty_file": b"",
        "truncated_length_field": b"\x10\x00\x00\x00\x00",
        "header_length_zero": struct.pack("<Q", 0) + data8,
        "header_length_past_end": struct.pack("<Q", 1000) + b'{"a":1}',
        "header_length_over_100mb": struct.pack("<Q", 100_000_001) + b"{}      ",
        "header_length_u64_max": struct.pack("<Q", 2**64 - 1) + b"{}      ",
        "header_not_json": pack("this is not json"),
        "header_truncated_json": pack('{"a":{"dtype":"F32"'),
        "header_trailing_garbage": pack('{} x'),
        "header_nul_padding": struct.pack("<Q", 8) + b"{}\0\0\0\0\0\0",
        "header_not_object": pack("[1, 2]"),
        "header_invalid_utf8": pack(b'{"\xff\xfe":' + json.dumps(one).encode() + b"}", data8),
        "header_nested_too_deep": pack('{"a":' + "[" * 1000 + "]" * 1000 + "}"),
        "duplicate_tensor_name": pack('{"a":%s,"a":%s}' % (json.dumps(one), json.dumps(one)), data8),
        "duplicate_key_in_tensor_entry":
            pack('{"a":{"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}}', data8),
        "duplicate_metadata_key": pack('{"__metadata__":{"k":"1","k":"2"},"a":%s}' % json.dumps(one), data8),
        "tensor_entry_not_object": pack({"a": [0, 8]}, data8),
        "unknown_dtype_f8": pack({"a": entry("F8_E4M3", [8], 0, 8)}, data8),
        "dtype_not_string": pack({"a": {"dtype": 4, "shape": [2], "data_offsets": [0, 8]}}, data8),
        "dtype_lowercase": pack({"a": entry("f32", [2], 0, 8)}, data8),
        "missing_data_offsets": pack({"a": {"dtype": "F32", "shape": [2]}}, data8),
        "missing_shape": pack({"a": {"dtype": "F32", "data_offsets": [0, 8]}}, data8),
        "extra_key_in_tensor_entry": pack({"a": dict(one, stride=[1])}, data8),
        "shape_not_array": pack({"a": entry("F32", 2, 0, 8)}, data8),
        "shape_negative": pack({"a": entry("F32", [-2], 0, 8)}, data8),
        "shape_fractional": pack({"a": entry("F32", [2.0], 0, 8)}, data8),
        "shape_string": pack({"a": entry("F32", ["2"], 0, 8)}, data8),
        "shape_above_int64": pack({"a": entry("U8", [2**63], 0, 8)}, data8),
        "shape_product_overflow": pack({"a": entry("F32", [2**32, 2**32, 0], 0, 8)}, data8),
        "shape_bytes_overflow": pack({"a": entry("F64", [2**62], 0, 8)}, data8),
        "offsets_not_pair": pack({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4, 8]}}, data8),
        "offsets_negative": pack({"a": entry("F32", [2], -8, 0)}, data8),
        "offsets_end_before_begin": pack({"a": entry("F32", [0], 8, 0)}, data8),
        "offsets_past_data_end": pack({"a": entry("F32", [4], 0, 16)}, data8),
        "offsets_u64_max": pack({"a": entry("U8", [8], 2**64 - 9, 2**64 - 1)}, data8),
        "size_mismatch_shape_vs_offsets": pack({"a": entry("F32", [3], 0, 8)}, data8),
        "overlap_offsets": pack({"a": entry("F32", [2], 0, 8), "b": entry("F32", [1], 4, 8)}, data8),
        "overlap_identical_ranges": pack({"a": one, "b": one}, data8),
        "overlap_empty_tensor_inside_another": pack({"a": one, "b": entry("F32", [0], 4, 4)}, data8),
        "gap_between_tensors": pack({"a": entry("F32", [1], 0, 4), "b": entry("F32", [1], 8, 12)}, data8 + f32(3.0)),
        "gap_at_start": pack({"a": entry("F32", [1], 4, 8)}, data8),
        "unused_trailing_bytes": pack({"a": one}, data8 + b"\0\0\0\0"),
        "data_without_tensors": pack("{}", data8),
        "metadata_not_object": pack({"__metadata__": "pt", "a": one}, data8),
        "metadata_value_not_string": pack({"__metadata__": {"step": 1000}, "a": one}, data8),
        # Found by the fuzzer: nlohmann reports a number literal beyond double as out_of_range, and
        # its exception tag leaked into the message.
        "number_literal_overflow_1e400": pack('{"a":{"dtype":"F32","shape":[1e400],"data_offsets":[0,8]}}', data8),
    }


def write(folder, files):
    os.makedirs(os.path.join(HERE, folder), exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(HERE, folder, name + ".safetensors"), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    write("valid", valid_files())
    write("malformed", malformed_files())
