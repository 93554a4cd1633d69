#!/usr/bin/env bash
# What a device call would send (docs/cuda.md, "Running it on a GPU"): the tracked and untracked,
# not ignored files of this checkout, a shared/ folder inside it, and the carried paths, against the
# device tool's limit of 64 MiB per call, less a margin (default 4 MiB) for files added before the
# call. Prints the sizes (the largest folders first, so a growing models/ shows) and exits 1 over
# the limit.
#
#   scripts/gpu_size_check.sh [--margin-mib N] CARRIED_PATH...
set -euo pipefail
cd "$(dirname "$0")/.."
margin_mib=4
if [[ ${1:-} == --margin-mib ]]; then
  margin_mib=$2
  shift 2
fi
limit=$((64 * 1024 * 1024))
allowed=$((limit - margin_mib * 1024 * 1024))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

# Per top-level folder, the bytes that travel (regular files; a link travels as a link).
sizes=$({ git ls-files -z --cached --others --exclude-standard; if [[ -d shared ]]; then find shared -type f -print0; fi; } |
  xargs -0 -r stat -c '%F %s %n' 2> /dev/null | awk '$1 == "regular" && $2 == "file" {print $3, $4}')
tree=$(awk '{s += $1} END {print s + 0}' <<< "$sizes")
largest=$(awk '{split($2, p, "/"); top = (p[2] == "" ? "." : p[1] "/"); by[top] += $1}
  END {for (d in by) print by[d], d}' <<< "$sizes" | sort -rn | head -n3 |
  awk '{printf "%s%s %.1f MiB", (NR > 1 ? ", " : ""), $2, $1 / 1048576}')
carried=0
for p in "$@"; do
  [[ -e $p ]] || { echo "gpu_size_check: $p (carried) does not exist" >&2; exit 1; }
  git check-ignore -q "$p" || { echo "gpu_size_check: $p is not ignored by git: it travels with the tree, not as a carried path" >&2; exit 1; }
  carried=$((carried + $(du -sb "$p" | cut -f1)))
done
total=$((tree + carried))
echo "tree $(mib "$tree") (largest: $largest)"
echo "carried $(mib "$carried") ($*)"
echo "total $(mib "$total") of $(mib "$limit"), margin $(mib $((limit - total))) (at least ${margin_mib} MiB wanted)"
if ((total > allowed)); then
  echo "gpu_size_check: the call would send $(mib "$total"), over $(mib "$allowed") (64 MiB less the margin): carry less, or shrink the tree" >&2
  exit 1
fi
