"""Token streams for training and validation.

A text file from tools/corpus (train.txt / valid.txt) holds documents separated by one blank line.
Each document is encoded whole (as the engine encodes a prompt) and followed by EOS; the stream is
the concatenation. A training sequence is BOS followed by T-1 tokens of the stream from a random
offset; its targets are the stream's next T tokens (so position 0, BOS, predicts the first of them).

Encoding uses the sentencepiece Python module (Debian: python3-sentencepiece). Without it, the
spm_encode command line is used per line, which differs slightly: it adds the dummy "▁" prefix at
the start of every line, not only of every document. The streams are cached as uint16/uint32 files
keyed by the text's and the tokenizer's hashes.
"""
import hashlib
import os
import subprocess
import sys

import numpy as np
import torch

NEWLINE_BYTE_PIECE = "<0x0A>"


class Tokenizer:
    def __init__(self, path):
        self.path = path
        try:
            import sentencepiece as spm
            self.sp = spm.SentencePieceProcessor(model_file=path)
        except ImportError:
            self.sp = None
            print("data: no sentencepiece Python module (Debian: python3-sentencepiece); using spm_encode "
                  "per line, which adds a dummy prefix at every line start", file=sys.stderr)
            self._cli_info()

    def _cli_info(self):
        # spm_export_vocab lists pieces in id order: vocab size and the special ids from the piece names.
        out = subprocess.run(["spm_export_vocab", "--model=" + self.path], check=True, stdout=subprocess.PIPE)
        pieces = [line.split("\t")[0] for line in out.stdout.decode("utf-8").split("\n") if line]
        self._vocab = len(pieces)
        self._bos, self._eos = pieces.index("<s>"), pieces.index("</s>")
        self._newline = pieces.index(NEWLINE_BYTE_PIECE) if NEWLINE_BYTE_PIECE in pieces else None

    @property
    def vocab_size(self):
        return self.sp.get_piece_size() if self.sp else self._vocab

    @property
    def bos_id(self):
        return self.sp.bos_id() if self.sp else self._bos

    @property
    def eos_id(self):
        return self.sp.eos_id() if self.sp else self._eos

    def encode_documents(self, docs):
        """list of documents -> list of id lists."""
        if self.sp:
            return self.sp.encode(docs)
        lines, owner = [], []
        for d, doc in enumerate(docs):
            for line in doc.split("\n"):
                lines.append(line)
                owner.append(d)
        out = subprocess.run(["spm_encode", "--model=" + self.path, "--output_format=id"],
                             input="\n".join(lines).encode("utf-8") + b"\n", check=True, stdout=subprocess.PIPE)
        encoded = [[int(x) for x in row.split()] for row in out.stdout.decode("ascii").split("\n")[:len(lines)]]
        result = [[] for _ in docs]
        for d, ids in zip(owner, encoded):
            if result[d] and self._newline is not None:
                result[d].append(self._newline)
            result[d].extend(ids)
        return result


def read_documents(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return [d.strip("\n") for d in text.split("\n\n") if d.strip("\n")]


def sha16(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def token_stream(text_path, tok, cache_dir=None):
    """The document stream of text_path as a 1-D int64 tensor (documents each followed by EOS)."""
    dtype = np.uint16 if tok.vocab_size <= 65536 else np.uint32
    cache = None
    if cache_dir:
        key = "%s-%s-%s%s" % (os.path.basename(text_path), sha16(text_path), sha16(tok.path),
                              "" if tok.sp else "-cli")
        cache = os.path.join(cache_dir, key + ".ids")
        if os.path.exists(cache):
            return torch.from_numpy(np.fromfile(cache, dtype=dtype).astype(np.int64))
    docs = read_documents(text_path)
    ids = []
    for doc in tok.encode_documents(docs):
        ids.extend(doc)
        ids.append(tok.eos_id)
    arr = np.asarray(ids, dtype=dtype)
    if cache:
        os.makedirs(cache_dir, exist_ok=True)
        arr.tofile(cache + ".tmp")
        os.replace(cache + ".tmp", cache)
    return torch.from_numpy(arr.astype(np.int64))


def random_batch(stream, batch, seq_len, bos, generator):
    """x, y [batch, seq_len]: x = BOS + stream[s : s+T-1], y = stream[s : s+T]."""
    starts = torch.randint(0, len(stream) - seq_len, (batch,), generator=generator)
    offsets = torch.arange(seq_len)
    y = stream[starts[:, None] + offsets[None, :]]
    x = torch.cat([torch.full((batch, 1), bos, dtype=torch.long), y[:, :-1]], dim=1)
    return x, y


def eval_batches(stream, batch, seq_len, bos, max_tokens):
    """Deterministic non-overlapping windows from the start of the stream, at most max_tokens targets."""
    windows = min((len(stream) - 1) // seq_len, max(1, max_tokens // seq_len))
    for b0 in range(0, windows, batch):
        starts = torch.arange(b0, min(windows, b0 + batch)) * seq_len
        y = stream[starts[:, None] + torch.arange(seq_len)[None, :]]
        x = torch.cat([torch.full((len(starts), 1), bos, dtype=torch.long), y[:, :-1]], dim=1)
        yield x, y
