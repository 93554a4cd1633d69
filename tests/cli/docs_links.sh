#!/usr/bin/env bash
# Every relative link in README.md and docs/*.md leads somewhere: the file exists, and a #anchor
# names a heading of that file as GitHub spells it (lower case; letters, digits, _, - and spaces
# kept, spaces made -; a repeated heading gets -1, -2, ...). Links inside ``` blocks and targets
# that are not paths (math such as psi(u), which renders as text) are left alone. Then the checker
# is tried on a small planted tree: a missing file, a missing anchor and a repeated heading's
# second anchor must be told apart from good links.
# Usage: docs_links.sh BIN_DIR SOURCE_DIR
set -euo pipefail
src=$2
source "$(dirname "$0")/lib.bash"

cat > "$tmp/links.py" <<'PY'
import os, re, sys

def headings(path):
    slugs, seen, code = set(), {}, False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            code = not code
            continue
        m = None if code else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))  # a link in a heading: its text
        slug = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        slugs.add(slug if n == 0 else f"{slug}-{n}")
    return slugs

root, files = sys.argv[1], sys.argv[2:]
cache, count = {}, 0
for f in files:
    code = False
    for no, line in enumerate(open(f, encoding="utf-8"), 1):
        if line.startswith("```"):
            code = not code
            continue
        if code:
            continue
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"^[a-z]+:", target) or not re.search(r"[#./]", target):
                continue  # a URL, or not a path
            count += 1
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
            where = f"{os.path.relpath(f, root)}:{no}: ({target})"
            if not os.path.exists(dest):
                print(f"BROKEN {where} no such file {os.path.relpath(dest, root)}")
            elif anchor and dest.endswith(".md"):
                if dest not in cache:
                    cache[dest] = headings(dest)
                if anchor not in cache[dest]:
                    print(f"BROKEN {where} no heading of {os.path.relpath(dest, root)} has that anchor")
print(f"LINKS {count}")
PY

check() {  # check ROOT FILES...: the checker's report
  /usr/bin/python3 "$tmp/links.py" "$@"
}

mapfile -t docs < <(ls "$src"/docs/*.md)
check "$src" "$src/README.md" "${docs[@]}" > "$tmp/report"
links=$(sed -n 's/^LINKS //p' "$tmp/report")
if grep -q '^BROKEN' "$tmp/report"; then
  fail "README.md and docs/*.md: $(grep -c '^BROKEN' "$tmp/report") of $links links lead nowhere:
$(grep '^BROKEN' "$tmp/report")"
elif [ "${links:-0}" -ge 100 ]; then
  pass "README.md and docs/*.md: all $links relative links lead to a file and heading"
else
  fail "only ${links:-0} relative links found in README.md and docs/*.md: the checker reads them wrong"
fi

# The planted tree.
mkdir -p "$tmp/plant/docs"
cat > "$tmp/plant/docs/a.md" <<'MD'
# Title
## Figures (Zen 4, 2026-11-29)
## Same
## Same
```
[inside a code block](missing.md)
```
math such as psi[r](u) stays text
MD
cat > "$tmp/plant/README.md" <<'MD'
[ok](docs/a.md) [ok](docs/a.md#figures-zen-4-2026-11-29) [ok](docs/a.md#same-1) [ok](#top)
[bad file](docs/b.md) [bad anchor](docs/a.md#figures) [bad repeat](docs/a.md#same-2)
# Top
MD
check "$tmp/plant" "$tmp/plant/README.md" "$tmp/plant/docs/a.md" > "$tmp/planted"
for want in "(docs/b.md) no such file" "(docs/a.md#figures) no heading" "(docs/a.md#same-2) no heading"; do
  if grep -qF "$want" "$tmp/planted"; then pass "planted: $want"; else fail "planted: not reported: $want"; fi
done
broken=$(grep -c '^BROKEN' "$tmp/planted" || true)
if [ "$broken" = 3 ] && grep -q '^LINKS 7$' "$tmp/planted"; then
  pass "planted: the good links, the code block and the math pass"
else
  fail "planted: expected 3 broken of 7 links: $(cat "$tmp/planted")"
fi

finish docs_links
