#!/usr/bin/env bash
# steady-server and steady-cli as real processes: sessions create/generate/fork/export/import/delete,
# errors and exit codes, metrics, SIGTERM drain and restart from the same --session-dir.
# Usage: server_cli.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"
server_pid=""
stop_server() {
  stop "$server_pid"
  server_pid=""
}

cli() { timeout 60 "$bin/steady-cli" --addr "127.0.0.1:$port" "$@"; }
# json_field FIELD: reads one JSON object on stdin, prints the field.
json_field() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }

# start_server LOG: starts steady-server on free ports (chosen by the server itself) and waits, at
# most 30 s, until it listens; sets server_pid, port and metrics_port.
start_server() {
  local log=$1
  "$bin/steady-server" --model "$tmp/model" --port 0 --metrics-port 0 --state-memory 16M \
    --session-dir "$tmp/sessions" --drain-timeout 2 2> "$log" &
  server_pid=$!
  started_pids+=("$server_pid")
  port=$(wait_for_line "$log" "$server_pid" 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p')
  metrics_port=$(sed -n 's|.*metrics on http://127\.0\.0\.1:\([0-9]*\)/metrics.*|\1|p' "$log")
  if [ -z "$port" ]; then
    echo "steady-server did not start:"; cat "$log"; exit 1
  fi
}

# sigterm_server: SIGTERM, then the server must exit 0 within 30 s.
sigterm_server() {
  kill -TERM "$server_pid"
  local rc=0
  for _ in $(seq 300); do
    kill -0 "$server_pid" 2> /dev/null || break
    sleep 0.1
  done
  if kill -0 "$server_pid" 2> /dev/null; then
    fail "server did not exit within 30 s of SIGTERM"
    stop_server
    return
  fi
  wait "$server_pid" || rc=$?
  server_pid=""
  [ "$rc" -eq 0 ] && pass "SIGTERM: drained and exited 0" || fail "SIGTERM: exit status $rc"
}

"$bin/steady" init --out "$tmp/model" --preset tiny --tokenizer "$src/tests/data/tokenizer/tokenizer.model" \
  --mechanism taylor --order 2 > /dev/null
mkdir -p "$tmp/sessions"
start_server "$tmp/server1.log"

cli health | grep -qx SERVING && pass "health: SERVING" || fail "health"
# The startup log names each weight format's instruction path on this CPU (docs/cpu.md).
grep -qE "steady-server: cpu kernels: .*, [0-9]+ threads, .*; bf16: .*; f16: (widening|avx2 \(F16C \+ FMA on packed f16\)).*; q8: .*; q4k: " "$tmp/server1.log" &&
  pass "startup log: the cpu kernels per weight format" || fail "startup log: $(grep 'cpu kernels' "$tmp/server1.log")"
cli info > "$tmp/info.json"
python3 - "$tmp/info.json" <<'PY' && pass "info: taylor, state bytes, limits" || fail "info: $(cat "$tmp/info.json")"
import json, sys
i = json.load(open(sys.argv[1]))
assert i["mechanism"] == "taylor" and i["model_name"] == "model", i
assert json.loads(i["layers"][0]["params_json"])["order"] == 2, i
assert int(i["state_bytes_per_session"]) > 0 and int(i["kv_cache_bytes_per_token"]) == 0, i
assert i["vocab_size"] == 512 and int(i["limits"]["max_new_tokens"]) > 0, i
PY

# Ephemeral sessions: greedy is deterministic, and so is seeded sampling.
a=$(cli generate --prompt "This License" --max-tokens 16 2> /dev/null)
b=$(cli generate --prompt "This License" --max-tokens 16 2> /dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && pass "generate: greedy is deterministic" || fail "greedy: '$a' vs '$b'"
a=$(cli generate --prompt "The" --max-tokens 16 --temperature 0.9 --top-k 40 --top-p 0.95 --repetition-penalty 1.2 --seed 7 2> /dev/null)
b=$(cli generate --prompt "The" --max-tokens 16 --temperature 0.9 --top-k 40 --top-p 0.95 --repetition-penalty 1.2 --seed 7 2> /dev/null)
[ "$a" = "$b" ] && pass "generate: seeded sampling is deterministic" || fail "seeded sampling differs"
cli generate --prompt "The" --max-tokens 5 --json > "$tmp/gen.jsonl" 2> /dev/null
python3 - "$tmp/gen.jsonl" <<'PY' && pass "generate --json: ids streamed, usage last" || fail "generate --json: $(cat "$tmp/gen.jsonl")"
import json, sys
msgs = [json.loads(l) for l in open(sys.argv[1])]
ids = [t for m in msgs for t in m["token_ids"]]
last = msgs[-1]
assert last["finish_reason"] in ("length", "stop"), last
assert int(last["usage"]["completion_tokens"]) == len(ids), msgs
assert all(m["finish_reason"] == "" for m in msgs[:-1]), msgs
PY

# Sessions: create, prefill, fork twice, continue one fork.
cli sessions create --id alpha | json_field session_id | grep -qx alpha && pass "sessions create --id" \
  || fail "sessions create"
generated=$(cli sessions create | json_field session_id)
[ -n "$generated" ] && pass "sessions create picks an id ($generated)" || fail "sessions create without id"
cli generate --session alpha --prompt "This License applies to" --max-tokens 0 > /dev/null 2> "$tmp/prefill.err"
grep -q "finish: length" "$tmp/prefill.err" && pass "prefill only (max-tokens 0)" || fail "prefill: $(cat "$tmp/prefill.err")"
alpha_pos=$(cli sessions get alpha | json_field position)
[ "$alpha_pos" -gt 0 ] && pass "session position $alpha_pos after prefill" || fail "position $alpha_pos"
cli sessions fork alpha --new-id beta | json_field position | grep -qx "$alpha_pos" && pass "fork keeps the position" \
  || fail "fork"
cli sessions fork alpha --new-id gamma > /dev/null
t_beta=$(cli generate --session beta --prompt " any program" --max-tokens 12 2> /dev/null)
[ -n "$t_beta" ] && pass "generate on a fork" || fail "generate on beta"

# Export alpha, import it as delta: delta continues exactly like beta (both copies of alpha).
cli sessions export alpha "$tmp/alpha.snap" 2> /dev/null && [ -s "$tmp/alpha.snap" ] && pass "export to a file" \
  || fail "export"
cli sessions import "$tmp/alpha.snap" --id delta | json_field position | grep -qx "$alpha_pos" \
  && pass "import keeps the position" || fail "import"
t_delta=$(cli generate --session delta --prompt " any program" --max-tokens 12 2> /dev/null)
[ "$t_delta" = "$t_beta" ] && pass "imported session continues like the fork" || fail "import: '$t_delta' vs '$t_beta'"

cli sessions delete gamma && pass "delete" || fail "delete"
cli sessions list | python3 -c "
import json, sys
ids = [s['session_id'] for s in json.load(sys.stdin)['sessions']]
assert ids == sorted(ids) and 'gamma' not in ids and {'alpha', 'beta', 'delta'} <= set(ids), ids" \
  && pass "list: ordered, without the deleted one" || fail "list"

# Errors: the server's code and a message naming the field; usage errors exit 2.
expect_cli_error() {  # NAME STATUS NEEDLE ARGS...
  local name=$1 want=$2 needle=$3 rc=0
  shift 3
  cli "$@" > /dev/null 2> "$tmp/err" || rc=$?
  if [ "$rc" -eq "$want" ] && grep -qF -- "$needle" "$tmp/err"; then pass "$name"; else
    fail "$name: exit $rc, stderr: $(cat "$tmp/err")"; fi
}
expect_cli_error "get deleted session: NOT_FOUND" 1 "NOT_FOUND" sessions get gamma
expect_cli_error "top_p 2: INVALID_ARGUMENT naming top_p" 1 "INVALID_ARGUMENT: top_p" generate --prompt x --top-p 2
expect_cli_error "negative max_tokens" 1 "max_tokens" generate --prompt x --max-tokens -1
expect_cli_error "empty stop string" 1 "stop[0]" generate --prompt x --stop ""
expect_cli_error "bad session id" 1 "INVALID_ARGUMENT: session_id" sessions create --id "a/b"
expect_cli_error "duplicate session id" 1 "ALREADY_EXISTS" sessions create --id alpha
expect_cli_error "unknown session: NOT_FOUND" 1 "NOT_FOUND" generate --session nobody --prompt x
head -c 100 "$tmp/alpha.snap" > "$tmp/truncated.snap"
expect_cli_error "truncated snapshot refused" 1 "steady-cli:" sessions import "$tmp/truncated.snap" --id broken
expect_cli_error "unknown flag: usage error" 2 "--bogus" generate --bogus 1
expect_cli_error "unknown command: usage error" 2 "unknown command" frobnicate
expect_cli_error "missing positional: usage error" 2 "sessions get" sessions get

# Metrics: Prometheus text over HTTP.
curl -sf "http://127.0.0.1:$metrics_port/metrics" > "$tmp/metrics.txt" || true
grep -q 'steady_requests_total{rpc="Generate",code="OK"}' "$tmp/metrics.txt" \
  && grep -q 'steady_requests_total{rpc="Generate",code="INVALID_ARGUMENT"}' "$tmp/metrics.txt" \
  && grep -q '^steady_time_to_first_token_seconds_count' "$tmp/metrics.txt" \
  && grep -q '^steady_sessions{state="resident"}' "$tmp/metrics.txt" \
  && pass "metrics: requests by rpc and code, TTFT, sessions" || fail "metrics: $(head -c 2000 "$tmp/metrics.txt")"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$metrics_port/nothing" || true)
[ "$code" = 404 ] && pass "metrics: 404 elsewhere" || fail "metrics 404: $code"

# SIGTERM, restart on the same --session-dir: alpha continues exactly as its fork beta did.
sigterm_server
start_server "$tmp/server2.log"
[ "$(cli sessions get alpha | json_field position)" = "$alpha_pos" ] && pass "restart: alpha restored" \
  || fail "restart: alpha position"
t_alpha=$(cli generate --session alpha --prompt " any program" --max-tokens 12 2> /dev/null)
[ "$t_alpha" = "$t_beta" ] && pass "restart: the session continues identically" || fail "restart: '$t_alpha' vs '$t_beta'"
beta_pos=$(cli sessions get beta | json_field position)
[ "$beta_pos" -gt "$alpha_pos" ] && pass "restart: beta keeps its generated tokens" || fail "beta position $beta_pos"

# SIGTERM during a generation longer than the drain (2 s): the stream ends at a step boundary with
# finish "cancelled" and the tokens generated so far stay in the session.
cli generate --session beta --prompt " and" --max-tokens 60000 > "$tmp/long.out" 2> "$tmp/long.err" &
cli_pid=$!
for _ in $(seq 100); do [ -s "$tmp/long.out" ] && break; sleep 0.1; done
sigterm_server
wait "$cli_pid" && grep -q "finish: cancelled" "$tmp/long.err" && pass "SIGTERM ends a running stream: cancelled" \
  || fail "long stream: $(cat "$tmp/long.err")"
start_server "$tmp/server3.log"
pos_after=$(cli sessions get beta | json_field position)
[ "$pos_after" -gt "$((beta_pos + 1))" ] && pass "restart: the cancelled stream's tokens are in the session" \
  || fail "after cancelled stream: $pos_after vs $beta_pos"
sigterm_server

finish server_cli
