#!/usr/bin/env python3
"""Normalizes the extracted documents and splits them into train.txt / valid.txt by document.

Normalization is light and the same for every source:
- CR/LF and CR become LF, tabs and other control characters become spaces;
- hard-wrapped sources (Austen, the Devil's Dictionary) are unwrapped: inside a paragraph (lines
  between blank lines) a line is joined to the previous one unless it is indented (verse, quotations
  and new paragraphs are indented in those texts);
- runs of spaces become one space, lines are stripped, empty lines dropped.
So a document is its paragraphs joined by "\\n", with no blank line inside; documents are joined by
one blank line ("\\n\\n") in train.txt and valid.txt, which is how the trainer finds their boundaries.

The split is by document and deterministic: a document goes to validation when
int(sha256(key)[:8], 16) % 10000 < valid_per_10000 (default 500, i.e. about 5%), key = "source/id",
except that both Bible translations use "bible/<OSIS book id>", so a book held out in one translation
is held out in the other too (the same text, translated, would otherwise leak into training). It does
not depend on the order of documents, on the other documents, or on the machine.

Standard library only.
"""
import argparse
import hashlib
import json
import os
import re

UNWRAP = {"austen", "devil"}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SPACES = re.compile(r" {2,}")


def unwrap(text):
    lines, out = text.split("\n"), []
    joinable = False  # whether the last output line may take a continuation
    for line in lines:
        if not line.strip():
            joinable = False
            out.append("")
        elif joinable and not line[:1].isspace():
            out[-1] = out[-1].rstrip() + " " + line.strip()
        else:
            out.append(line)
            joinable = True
    return "\n".join(out)


def normalize(source, text):
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\t", " ")
    text = _CONTROL.sub(" ", text)
    if source in UNWRAP:
        text = unwrap(text)
    lines = (_SPACES.sub(" ", line).strip() for line in text.split("\n"))
    return "\n".join(line for line in lines if line)


SAME_WORK = {"kjv": "bible", "web": "bible"}  # sources that are translations of one work


def is_valid(source, doc_id, per_10000):
    key = "%s/%s" % (SAME_WORK.get(source, source), doc_id)
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
    return int(digest[:8], 16) % 10000 < per_10000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--valid-per-10000", type=int, default=500)
    ap.add_argument("--provenance", default="", help="JSON file of package names/versions to copy into the manifest")
    args = ap.parse_args()

    splits = {"train": [], "valid": []}
    sources = {}
    with open(os.path.join(args.work, "documents.jsonl"), encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            text = normalize(doc["source"], doc["text"])
            if not text:
                continue
            split = "valid" if is_valid(doc["source"], doc["id"], args.valid_per_10000) else "train"
            splits[split].append(text)
            s = sources.setdefault(doc["source"], {"documents": 0, "bytes": 0, "train_bytes": 0, "valid_bytes": 0,
                                                   "valid_documents": []})
            size = len(text.encode("utf-8"))
            s["documents"] += 1
            s["bytes"] += size
            s[split + "_bytes"] += size
            if split == "valid":
                s["valid_documents"].append(doc["id"])

    manifest = {"format": "steady-corpus", "version": 1, "valid_per_10000": args.valid_per_10000,
                "sources": sources, "files": {}}
    for split, docs in splits.items():
        path = os.path.join(args.work, split + ".txt")
        data = ("\n\n".join(docs) + "\n").encode("utf-8")
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
        manifest["files"][split + ".txt"] = {"documents": len(docs), "bytes": len(data),
                                             "sha256": hashlib.sha256(data).hexdigest()}
    if args.provenance:
        with open(args.provenance, encoding="utf-8") as f:
            manifest["packages"] = json.load(f)
    with open(os.path.join(args.work, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, ensure_ascii=False)
        f.write("\n")
    for name, s in sorted(sources.items()):
        print("split: %-10s %5d docs %10d bytes (valid: %d docs, %d bytes)" % (
            name, s["documents"], s["bytes"], len(s["valid_documents"]), s["valid_bytes"]))
    for name, info in manifest["files"].items():
        print("split: %-10s %5d docs %10d bytes" % (name, info["documents"], info["bytes"]))


if __name__ == "__main__":
    main()
