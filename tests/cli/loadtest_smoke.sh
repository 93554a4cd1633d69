#!/usr/bin/env bash
# steady-loadtest against a real steady-server (tiny random taylor model): closed loop, open loop and
# multi-turn runs, their JSON reports (counts, no errors, ordered percentiles, per-turn records,
# tokens counted), speculation's counts, an invalid parameter counted under INVALID_ARGUMENT, and the
# plot script's PNGs.
# Usage: loadtest_smoke.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"

"$bin/steady" init --out "$tmp/model" --preset tiny --tokenizer "$src/tests/data/tokenizer/tokenizer.model" > /dev/null
"$bin/steady-server" --model "$tmp/model" --mechanism taylor --order 2 --port 0 --state-memory 16M \
  2> "$tmp/server.log" &
server_pid=$!
started_pids+=("$server_pid")
port=$(wait_for_line "$tmp/server.log" "$server_pid" 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p')
if [ -z "$port" ]; then
  echo "steady-server did not start:"; cat "$tmp/server.log"; exit 1
fi

# Every run has a 20 s deadline per call and the whole command 30 s.
loadtest() { timeout 30 "$bin/steady-loadtest" --addr "127.0.0.1:$port" --timeout 20 --seed 1 "$@"; }

# check_report NAME FILE EXPECTED_REQUESTS [multi]: the JSON's counts, errors, percentiles, tokens.
check_report() {
  /usr/bin/python3 - "$@" <<'PY'
import json, math, sys
name, path, expected = sys.argv[1], sys.argv[2], int(sys.argv[3])
multi = len(sys.argv) > 4
r = json.load(open(path))
s = r["summary"]
assert r["format"] == "steady-loadtest/1", r["format"]
assert s["requests"] == expected and s["completed"] == expected and s["failed"] == 0, s
assert s["errors"] == {} and s["session_errors"] == {}, s
assert len(r["requests"]) == expected, len(r["requests"])
for metric in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
    d = s[metric]
    assert d["count"] > 0 and 0 < d["p50"] <= d["p90"] <= d["p99"], (metric, d)
assert s["ttft_ms"]["count"] == expected and s["e2e_ms"]["count"] == expected, s
assert s["output_tokens"] > 0 and s["prompt_tokens"] > 0, s
assert s["output_tokens"] == sum(x["output_tokens"] for x in r["requests"]), s
assert s["requests_per_s"] > 0 and s["output_tokens_per_s"] > 0, s
for x in r["requests"]:
    assert x["code"] == "OK" and x["finish_reason"] in ("length", "stop"), x
    assert 1 <= x["output_tokens"] <= x["output_tokens_target"], x
    assert x["finish_reason"] == "stop" or x["output_tokens"] == x["output_tokens_target"], x
    assert x["prompt_tokens"] > 0 and x["ttft_ms"] <= x["e2e_ms"], x
    # ~N-token prompts: the calibrated words-per-token keeps the server's count near the target.
    assert 0.5 * x["prompt_tokens_target"] <= x["prompt_tokens"] <= 2 * x["prompt_tokens_target"] + 2, x
if multi:
    sessions, turns = r["config"]["sessions"], r["config"]["turns"]
    assert [t["turn"] for t in r["turns"]] == list(range(1, turns + 1)), r["turns"]
    for t in r["turns"]:
        assert t["ttft_ms"]["count"] == sessions and t["e2e_ms"]["count"] == sessions, t
        assert t["ttft_ms"]["p50"] <= t["ttft_ms"]["p90"] and t["e2e_ms"]["p50"] <= t["e2e_ms"]["p90"], t
    # Turns append to one session: its position grows turn after turn.
    for sess in range(sessions):
        pos = [x["session_position"] for x in r["requests"] if x["session"] == sess]
        assert len(pos) == turns and all(a < b for a, b in zip(pos, pos[1:])), pos
PY
}

loadtest --concurrency 4 --requests 12 --prompt-tokens uniform:16:48 --output-tokens fixed:8 \
  --slo-ttft-ms 60000 --slo-tpot-ms 60000 --label closed --json "$tmp/closed.json" > "$tmp/closed.txt" \
  && check_report closed "$tmp/closed.json" 12 && grep -q "^TTFT" "$tmp/closed.txt" \
  && pass "closed loop: 12 requests at concurrency 4" || fail "closed loop: $(cat "$tmp/closed.txt")"
/usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['summary']; assert s['good_requests'] == 12, s" \
  "$tmp/closed.json" && pass "goodput: every request meets a generous SLO" || fail "goodput"

# Speculation on every call: the same greedy tokens (output hashes) as plain calls, the drafts reported.
loadtest --concurrency 2 --requests 6 --prompt-tokens fixed:48 --output-tokens fixed:12 \
  --json "$tmp/plain.json" > /dev/null \
  && loadtest --concurrency 2 --requests 6 --prompt-tokens fixed:48 --output-tokens fixed:12 --speculative ngram \
       --draft-tokens 3 --json "$tmp/spec.json" > "$tmp/spec.txt" \
  && check_report spec "$tmp/spec.json" 6 && grep -q "^speculative .* drafted" "$tmp/spec.txt" \
  && /usr/bin/python3 - "$tmp/plain.json" "$tmp/spec.json" <<'PY' \
  && pass "--speculative ngram: plain calls' tokens, drafted and accepted reported" || fail "speculative: $(cat "$tmp/spec.txt" 2>&1)"
import json, math, sys
plain, spec = (json.load(open(p)) for p in sys.argv[1:])
by_index = lambda r: {x["index"]: x["output_hash"] for x in r["requests"]}
assert by_index(plain) == by_index(spec), "speculation changed the greedy tokens"
s = spec["summary"]
assert spec["config"]["speculative"] == "ngram" and spec["config"]["draft_tokens"] == 3, spec["config"]
assert s["drafted_tokens"] > 0 and 0 <= s["accepted_tokens"] <= s["drafted_tokens"], s
assert math.isclose(s["acceptance_rate"], s["accepted_tokens"] / s["drafted_tokens"]), s
assert s["drafted_tokens"] == sum(x.get("drafted_tokens", 0) for x in spec["requests"]), s
assert plain["summary"]["drafted_tokens"] == 0, plain["summary"]
PY

loadtest --request-rate 20 --requests 15 --prompt-tokens fixed:32 --output-tokens uniform:4:8 \
  --json "$tmp/open.json" > "$tmp/open.txt" \
  && check_report open "$tmp/open.json" 15 \
  && pass "open loop: 15 requests at 20 requests/s" || fail "open loop: $(cat "$tmp/open.txt")"

loadtest --sessions 3 --turns 4 --prompt-tokens fixed:24 --output-tokens fixed:6 \
  --json "$tmp/multi.json" > "$tmp/multi.txt" \
  && check_report multi "$tmp/multi.json" 12 multi \
  && pass "multi-turn: 3 sessions x 4 turns, per-turn records" || fail "multi-turn: $(cat "$tmp/multi.txt")"
if timeout 10 "$bin/steady-cli" --addr "127.0.0.1:$port" sessions list > "$tmp/sessions.json"; then
  grep -q loadtest- "$tmp/sessions.json" && fail "multi-turn: sessions left behind" \
    || pass "multi-turn: sessions deleted at the end"
else
  fail "sessions list"
fi

# Open-loop arrivals: 100 requests/s on average; gamma shape 4 is more regular than shape 0.25.
for b in 0.25 1 4; do
  loadtest --request-rate 100 --burstiness "$b" --requests 60 --prompt-tokens fixed:4 --output-tokens fixed:1 \
    --json "$tmp/burst_$b.json" > /dev/null || fail "burstiness $b: run"
done
/usr/bin/python3 - "$tmp" <<'PY' && pass "open loop: mean gap ~1/rate, burstiness orders the gaps' spread, sends follow the schedule" \
  || fail "open-loop arrivals"
import json, statistics, sys
# The schedule's gaps (the arrival process itself: exact, not disturbed by a loaded machine), and
# the sends following it.
def gaps(b):
    r = json.load(open(f"{sys.argv[1]}/burst_{b}.json"))
    assert r["summary"]["completed"] == 60 and r["config"]["burstiness"] == float(b), r["summary"]
    lag = sorted(x["start_s"] - x["scheduled_s"] for x in r["requests"])
    assert lag[0] >= 0 and lag[len(lag) // 2] < 0.1, lag
    t = sorted(x["scheduled_s"] for x in r["requests"])
    return [y - x for x, y in zip(t, t[1:])]
cv = {b: statistics.pstdev(gaps(b)) / statistics.mean(gaps(b)) for b in ("0.25", "1", "4")}
assert 0.005 <= statistics.mean(gaps("1")) <= 0.02, statistics.mean(gaps("1"))
assert cv["4"] < cv["1"] < cv["0.25"], cv
PY

# An invalid parameter: every call fails with INVALID_ARGUMENT and the run still reports (exit 0).
loadtest --requests 3 --top-p 2 --json "$tmp/invalid.json" > "$tmp/invalid.txt" \
  && /usr/bin/python3 - "$tmp/invalid.json" <<'PY' && grep -q "INVALID_ARGUMENT: 3" "$tmp/invalid.txt" \
  && pass "top_p 2: counted under INVALID_ARGUMENT" || fail "invalid parameter: $(cat "$tmp/invalid.txt")"
import json, sys
r = json.load(open(sys.argv[1]))
s = r["summary"]
assert s["requests"] == 3 and s["failed"] == 3 and s["completed"] == 0, s
assert s["errors"] == {"INVALID_ARGUMENT": 3}, s
assert all(x["code"] == "INVALID_ARGUMENT" and x["error"].startswith("top_p") for x in r["requests"]), r["requests"]
PY

# Usage errors exit 2 before any call.
rc=0; "$bin/steady-loadtest" --addr "127.0.0.1:$port" --concurrency 2 --request-rate 5 > /dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] && pass "usage error: exit 2" || fail "usage error: exit $rc"
rc=0; "$bin/steady-loadtest" --addr "127.0.0.1:$port" --prompt-tokens normal:5 > /dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] && pass "bad length distribution: exit 2" || fail "bad length distribution: exit $rc"

stop "$server_pid"

timeout 60 /usr/bin/python3 "$src/tools/plot/plot_reports.py" "$tmp/closed.json" "$tmp/open.json" "$tmp/multi.json" \
  --out-dir "$tmp/img" --prefix smoke > "$tmp/plot.txt" 2>&1 || fail "plot_reports: $(cat "$tmp/plot.txt")"
for chart in concurrency rate turns; do
  png="$tmp/img/smoke_$chart.png"
  if [ -s "$png" ] && [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ]; then
    pass "plot: smoke_$chart.png is a PNG"
  else
    fail "plot: smoke_$chart.png missing or not a PNG"
  fi
done

finish loadtest
