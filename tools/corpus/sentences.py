#!/usr/bin/env python3
"""Splits text into one sentence per line for spm_train, which skips input lines longer than its
--max_sentence_length (4,192 bytes by default): an address of the State of the Union corpus is one
line of up to ~200 KB.

A sentence ends after . ! or ? (plus closing quotes or brackets) followed by whitespace and a
capital letter, digit or opening quote. A piece still longer than --max-bytes is cut at the last
space before the limit (or, with no space, at a UTF-8 character boundary). Pieces are stripped;
empty ones are dropped. Only the tokenizer's training input is split this way: the training text
itself keeps its lines.

  python3 sentences.py [--max-bytes 4000] < train.txt > sentences.txt

Standard library only.
"""
import argparse
import re
import sys

_BOUNDARY = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*(\s+)(?=[\"'\u201c\u2018(\[]*[A-Z0-9])")


# Titles and abbreviations that end in a period without ending the sentence.
_ABBREVIATIONS = {"Mr", "Mrs", "Messrs", "Dr", "St", "Mt", "Gen", "Col", "Capt", "Lieut", "Hon", "Rev", "Sr", "Jr",
                  "No", "Vol", "vs", "Co", "Esq", "viz", "cf", "i.e", "e.g", "U.S"}


def split_sentences(line):
    start = 0
    for m in _BOUNDARY.finditer(line):
        word = line[:m.start()].rsplit(None, 1)[-1] if line[:m.start()].strip() else ""
        if line[m.start()] == "." and (word in _ABBREVIATIONS or len(word) == 1):
            continue  # "Mr. Smith", initials "J. Q. Adams"
        yield line[start:m.start(1)]
        start = m.end(1)
    yield line[start:]


def cut(piece, max_bytes):
    """Pieces of at most max_bytes UTF-8 bytes, cut at spaces where possible."""
    while len(piece.encode("utf-8")) > max_bytes:
        head = piece.encode("utf-8")[:max_bytes].decode("utf-8", "ignore")
        at = head.rfind(" ")
        if at <= 0:
            at = len(head)
        yield piece[:at]
        piece = piece[at:].lstrip()
    yield piece


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max-bytes", type=int, default=4000)
    args = ap.parse_args()
    out = sys.stdout
    for line in sys.stdin:
        for sentence in split_sentences(line.rstrip("\n")):
            for piece in cut(sentence.strip(), args.max_bytes):
                if piece:
                    out.write(piece + "\n")


if __name__ == "__main__":
    main()
