"""Minimal pure-Python safetensors reader/writer for the command-line tests (F32/F64 only)."""
import json
import struct
import sys

_FMT = {"F32": ("f", 4), "F64": ("d", 8)}


def write(path, tensors, dtype="F32"):
    """tensors: {name: (shape, flat list of floats)}"""
    header, blobs, offset = {}, [], 0
    code, size = _FMT[dtype]
    for name, (shape, values) in tensors.items():
        blob = struct.pack("<%d%s" % (len(values), code), *values)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        code, size = _FMT[info["dtype"]]
        begin, end = info["data_offsets"]
        count = (end - begin) // size
        out[name] = (info["shape"], list(struct.unpack("<%d%s" % (count, code), data[8 + n + begin:8 + n + end])))
    return out


if __name__ == "__main__":
    print(read(sys.argv[1]).keys())
