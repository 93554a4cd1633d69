#!/usr/bin/env bash
# Two or more builds of a Google Benchmark binary (matmul_bench before and after a kernel change)
# run in turn, ROUNDS times, so that a VM's slow and fast spells fall on each alike; prints per
# benchmark each binary's median real time and its range over the rounds, as a markdown table.
# One run of each gives a figure from a different minute; the medians of alternated rounds are the
# comparison docs/benchmarks.md quotes ("The 4-bit kernels asking ahead at one row").
#
# Usage: alternate.sh ROUNDS FILTER BINARY BINARY [BINARY...]
#   e.g. cp build/bin/matmul_bench /tmp/before; (change, rebuild)
#        flock /tmp/steady-cpu.lock tools/bench/alternate.sh 5 'BM_Q4KDot/rows:1/in:2048/out:128256/path:2' /tmp/before build/bin/matmul_bench
# MIN_TIME (default 0.1): --benchmark_min_time of each run. Run it under the CPU lock (`flock
# /tmp/steady-cpu.lock tools/bench/alternate.sh ...`) so that no build or test shares the cores; it
# does not take the lock itself, since the test suite, which calls it, runs under that lock.
set -euo pipefail

usage() { echo "usage: $0 ROUNDS FILTER BINARY BINARY [BINARY...]" >&2; exit 2; }
[[ $# -ge 4 ]] || usage
rounds=$1 filter=$2
shift 2
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "$0: ROUNDS must be a positive integer, got '$rounds'" >&2; exit 2; }
for b in "$@"; do
  [[ -x $b && -f $b ]] || { echo "$0: not an executable file: $b" >&2; exit 2; }
done

out=$(mktemp -d) || { echo "$0: mktemp failed" >&2; exit 1; }
trap 'rm -rf "$out"' EXIT

for ((i = 0; i < rounds; i++)); do
  for ((j = 1; j <= $#; j++)); do
    b=${!j}
    if ! "$b" --benchmark_filter="$filter" --benchmark_min_time="${MIN_TIME:-0.1}" \
      --benchmark_format=json > "$out/$i.$j.json" 2> "$out/err"; then
      echo "$0: $b exited with an error: $(tail -3 "$out/err")" >&2
      exit 1
    fi
  done
done

/usr/bin/python3 - "$out" "$rounds" "$@" <<'PY'
import json, statistics, sys
out, rounds, binaries = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
times = {}  # (benchmark, binary index) -> real times in the benchmark's unit
units = {}
for i in range(rounds):
    for j in range(len(binaries)):
        text = open(f"{out}/{i}.{j + 1}.json").read()  # empty where the filter matched nothing
        for r in json.loads(text)["benchmarks"] if text.strip() else []:
            if r.get("run_type", "iteration") != "iteration" or r.get("error_occurred"):
                continue
            name = r["name"].removesuffix("/real_time")
            times.setdefault((name, j), []).append(r["real_time"])
            units[name] = r.get("time_unit", "ns")
names = sorted({n for n, _ in times})
if not names:
    sys.exit("no benchmark ran that matches the filter (or every one skipped)")
print("| benchmark | " + " | ".join(f"{j + 1}: {b}" for j, b in enumerate(binaries)) + " |")
print("|---|" + "---|" * len(binaries))
for n in names:
    cells = []
    for j in range(len(binaries)):
        t = times.get((n, j))
        cells.append(f"{statistics.median(t):.0f} {units[n]} [{min(t):.0f}-{max(t):.0f}]" if t else "-")
    print(f"| {n} | " + " | ".join(cells) + " |")
print(f"\nmedian [range] of {rounds} alternated rounds")
PY
