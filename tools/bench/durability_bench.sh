#!/usr/bin/env bash
# What crash safety costs and how fast it recovers (docs/durability.md, docs/benchmarks.md):
#  1. per-turn latency of the multi-turn load (steady-loadtest --sessions --turns) on the shipped
#     tiny-softmax served as taylor P=3 (the demo: 333 KB per session), without a session store,
#     with --durability shutdown and with --durability turn; the three run interleaved, ROUNDS times;
#  2. recovery after kill -9 with SESSIONS stored sessions: the server's steady_recovery_seconds and
#     the time from exec to listening.
# Usage: tools/bench/durability_bench.sh [OUT_DIR] [ROUNDS] [SESSIONS]   (from the source root, after
# the build; defaults: a temp dir, 5, 1000)
set -euo pipefail
bin=build/bin
out=${1:-}
rounds=${2:-5}
recovery_sessions=${3:-1000}
tmp=$(mktemp -d)
[ -n "$out" ] || out=$tmp/out
mkdir -p "$out"
server_pid=""
stop_server() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2> /dev/null; then
    kill -"${1:-TERM}" "$server_pid" 2> /dev/null || true
    wait "$server_pid" 2> /dev/null || true
  fi
  server_pid=""
}
trap 'stop_server KILL; rm -rf "$tmp"' EXIT

# start_server LOG ARGS...: steady-server on a free port; sets server_pid, addr and metrics.
start_server() {
  local log=$1
  shift
  "$bin/steady-server" --model models/tiny-softmax --mechanism taylor --order 3 --port 0 --metrics-port 0 "$@" \
    2> "$log" &
  server_pid=$!
  local port=""
  for _ in $(seq 600); do
    port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
    [ -n "$port" ] && break
    sleep 0.05
  done
  [ -n "$port" ] || { cat "$log"; exit 1; }
  addr=127.0.0.1:$port
  metrics=$(sed -n 's|.*metrics on \(http://[^ ]*\).*|\1|p' "$log")
}

echo "## Per-turn latency: 8 sessions x 25 turns, prompts of 32-96 tokens, 8-24 output tokens (ms)"
echo
for round in $(seq "$rounds"); do
  for mode in none shutdown turn; do
    rm -rf "$tmp/sessions"
    case $mode in
      none) start_server "$tmp/server.log" ;;
      *) start_server "$tmp/server.log" --session-dir "$tmp/sessions" --durability "$mode" ;;
    esac
    "$bin/steady-loadtest" --addr "$addr" --sessions 8 --turns 25 --prompt-tokens uniform:32:96 --output-tokens uniform:8:24 \
      --seed "$round" --timeout 120 --label "$mode" --json "$out/turns_${mode}_$round.json" > /dev/null
    curl -s "$metrics" | grep -E '^steady_store_fsync_seconds_(sum|count)|^steady_durable_turns_total' \
      > "$out/metrics_${mode}_$round.txt" || true
    stop_server
  done
done
python3 - "$out" "$rounds" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print("| mode | TTFT p50 | TTFT p99 | E2E p50 | E2E p99 | E2E p50 vs none |")
print("|---|---|---|---|---|---|")
rows = {}
for mode in ("none", "shutdown", "turn"):
    s = [json.load(open("%s/turns_%s_%d.json" % (out, mode, r)))["summary"] for r in range(1, rounds + 1)]
    med = lambda key, q: sorted(x[key][q] for x in s)[len(s) // 2]  # median over the rounds
    rows[mode] = [med("ttft_ms", "p50"), med("ttft_ms", "p99"), med("e2e_ms", "p50"), med("e2e_ms", "p99")]
for mode, r in rows.items():
    print("| %s | %.1f | %.1f | %.1f | %.1f | %.3f |" % (mode, *r, r[2] / rows["none"][2]))
PY
echo
grep -h "" "$out"/metrics_turn_1.txt | sed 's/^/    /'
echo

echo "## Recovery after kill -9: $recovery_sessions sessions of one turn each"
rm -rf "$tmp/sessions"
start_server "$tmp/server.log" --session-dir "$tmp/sessions"
/usr/bin/python3 - "$addr" "$recovery_sessions" "$PWD" <<'PY'
import os, sys, tempfile
sys.path.insert(0, os.path.join(sys.argv[3], "tests/python"))
import steady_grpc
work = tempfile.mkdtemp(prefix="steady_bench_")
steady_grpc.generate_stubs(work, sys.argv[3])
import grpc
from steady.v1 import inference_pb2 as pb, inference_pb2_grpc as pb_grpc
stub = pb_grpc.InferenceStub(grpc.insecure_channel(sys.argv[1]))
for i in range(int(sys.argv[2])):
    stub.CreateSession(pb.CreateSessionRequest(session_id="r%d" % i), timeout=30)
    list(stub.Generate(pb.GenerateRequest(session_id="r%d" % i, prompt="Call me Ishmael.", max_tokens=4), timeout=30))
import shutil; shutil.rmtree(work)
PY
stop_server KILL
du -sh "$tmp/sessions" | sed 's/^/store: /'
start=$(date +%s.%N)
start_server "$tmp/server2.log" --session-dir "$tmp/sessions"
ready=$(date +%s.%N)
curl -s "$metrics" | grep -E '^steady_recovery'
stop_server
empty_start=$(date +%s.%N)
start_server "$tmp/server3.log" --session-dir "$tmp/empty"
empty_ready=$(date +%s.%N)
stop_server
python3 -c "print('exec to listening: %.2f s (%.2f s with an empty store)' % ($ready - $start, $empty_ready - $empty_start))"
