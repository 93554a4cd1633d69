#!/usr/bin/env python3
"""A draft model cut from a checkpoint: its first N layers, with the same embedding, final norm and
tokenizer (a "self-speculative" draft: no training). For docs/speculative.md's draft-model figures.

Usage: draft_from_layers.py SOURCE_DIR OUT_DIR LAYERS
Reads and writes safetensors by hand (no package needed): 8-byte header length, JSON header, data.
"""
import json
import os
import re
import shutil
import struct
import sys


def main():
    src, out, layers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    if not 1 <= layers <= config["num_hidden_layers"]:
        sys.exit(f"LAYERS must be in [1, {config['num_hidden_layers']}]")
    config["num_hidden_layers"] = layers
    with open(os.path.join(src, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    kept, blobs, offset = {}, [], 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        m = re.match(r"model\.layers\.(\d+)\.", name)
        if m and int(m.group(1)) >= layers:
            continue
        begin, end = info["data_offsets"]
        blobs.append(data[begin:end])
        kept[name] = {"dtype": info["dtype"], "shape": info["shape"], "data_offsets": [offset, offset + end - begin]}
        offset += end - begin
    if "__metadata__" in header:
        kept["__metadata__"] = header["__metadata__"]
    os.makedirs(out, exist_ok=True)
    text = json.dumps(kept).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    for name in ("tokenizer.model", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if os.path.exists(os.path.join(src, name)):
            shutil.copy(os.path.join(src, name), out)


if __name__ == "__main__":
    main()
