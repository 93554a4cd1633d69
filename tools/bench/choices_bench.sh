#!/bin/bash
# n = 4 by fork against 4 requests (docs/benchmarks.md, "n choices by forking the state"): a tiny
# model, steady-server and steady-gateway on 127.0.0.1, then choices_bench.py; everything it started
# or wrote is gone when it exits.
# Usage: tools/bench/choices_bench.sh [BIN_DIR]   (from the source tree; default build/bin)
set -euo pipefail
B=${1:-build/bin}
T=$(mktemp -d)
sp= gp=
trap 'kill $gp $sp 2> /dev/null; wait 2> /dev/null; rm -rf "$T"' EXIT
"$B/steady" init --out "$T/model" --preset tiny --tokenizer tests/data/tokenizer/tokenizer.model --mechanism taylor --order 2 > /dev/null
"$B/steady-server" --model "$T/model" --port 0 --state-memory 64M --max-new-tokens 256 2> "$T/server.log" & sp=$!
port=
for _ in $(seq 100); do port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$T/server.log"); [ -n "$port" ] && break; sleep 0.2; done
[ -n "$port" ] || { cat "$T/server.log"; exit 1; }
"$B/steady-gateway" --grpc-addr "127.0.0.1:$port" --http-port 0 2> "$T/gw.log" & gp=$!
url=
for _ in $(seq 100); do url=$(sed -n 's|.*listening on \(http://127\.0\.0\.1:[0-9]*\).*|\1|p' "$T/gw.log"); [ -n "$url" ] && break; sleep 0.2; done
[ -n "$url" ] || { cat "$T/gw.log"; exit 1; }
python3 "$(dirname "$0")/choices_bench.py" "$url" 4 1000 64 3
