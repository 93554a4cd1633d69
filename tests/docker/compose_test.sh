#!/usr/bin/env bash
# The container images and the compose topology (docker/), with podman and no registry: builds the
# base and every image, brings docker/compose.yaml up under a project name of its own, streams a
# generation through the gateway and through nginx with steady-cli, kills the server container that
# holds the session and continues it on another, checks the healthchecks and Prometheus, and tears
# everything down (containers, network, volume), also when it fails.
# Exit 77 (ctest: skipped, with the reason printed) only where podman is not installed.
# Usage: compose_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$(cd "$2" && pwd)
source "$src/tests/cli/lib.bash"
export CONTAINERS_CONF=$src/docker/containers.conf
cli="$bin/steady-cli"

for tool in podman podman-compose mmdebstrap; do
  command -v "$tool" > /dev/null || { echo "SKIPPED: $tool is not installed (scripts/install-deps.sh installs it)"; exit 77; }
done

start=$(date +%s)
bash "$src/docker/build.sh" > "$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "docker/build.sh"; finish compose; }
build_s=$(($(date +%s) - start))
pass "images built in ${build_s} s: $(grep -oE 'steady-[a-z]+ [0-9]+ MB' "$tmp/build.log" | tr '\n' ',' | sed 's/,$//')"
server_mb=$(sed -n 's/.*steady-server \([0-9]*\) MB.*/\1/p' "$tmp/build.log")
[ "${server_mb:-999}" -lt 350 ] && pass "the server image is ${server_mb} MB with the model (goal: under 350)" \
  || fail "the server image is ${server_mb} MB (goal: under 350)"

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export STEADY_GRPC_PORT=$(free_port) STEADY_HTTP_PORT=$(free_port) STEADY_PROMETHEUS_PORT=$(free_port)
project=steadytest$$
compose=(podman-compose -p "$project" -f "$src/docker/compose.yaml")
teardown() {
  "${compose[@]}" down -v > /dev/null 2>&1 || true
  podman rm -f $(podman ps -aq --filter "label=io.podman.compose.project=$project") > /dev/null 2>&1 || true
  podman network rm -f "${project}_default" > /dev/null 2>&1 || true
  podman volume rm -f "${project}_redis-data" > /dev/null 2>&1 || true
  cleanup
}
trap teardown EXIT

"${compose[@]}" up -d > "$tmp/up.log" 2>&1 || { cat "$tmp/up.log"; fail "podman-compose up"; finish compose; }
addr=127.0.0.1:$STEADY_GRPC_PORT
# Up when nginx reaches a replica that reaches Redis: a session can be created (at most 90 s).
for _ in $(seq 180); do "$cli" --addr "$addr" --timeout 2 sessions create --id alice > /dev/null 2>&1 && break; sleep 0.5; done
"$cli" --addr "$addr" sessions get alice > /dev/null 2>&1 && pass "the stack is up: a session created through nginx" \
  || { podman ps -a; for c in $(podman ps -aq --filter "label=io.podman.compose.project=$project"); do podman logs "$c" 2>&1 | tail -3; done; fail "stack up"; finish compose; }

# Each server's HEALTHCHECK (the gRPC health service); podman runs it on demand here (no systemd timers).
healthy=0
for n in 1 2 3; do
  for _ in $(seq 20); do podman healthcheck run "${project}_server${n}_1" > /dev/null 2>&1 && { healthy=$((healthy + 1)); break; }; sleep 0.5; done
done
[ $healthy -eq 3 ] && pass "HEALTHCHECK: 3 of 3 servers healthy" || fail "HEALTHCHECK: $healthy of 3 servers healthy"

# Through nginx with steady-cli, then through the gateway (curl), on the same session.
"$cli" --addr "$addr" generate --session alice --prompt "Call me Ishmael." --max-tokens 12 > "$tmp/cli.out" 2> "$tmp/cli.err" \
  && grep -q "session position" "$tmp/cli.err" && pass "steady-cli through nginx: $(tr -d '\n' < "$tmp/cli.out" | head -c 60)" \
  || fail "steady-cli through nginx: $(cat "$tmp/cli.err")"
curl -sN --max-time 60 "127.0.0.1:$STEADY_HTTP_PORT/v1/generate" \
  -d '{"session_id": "alice", "prompt": " Some years ago", "max_tokens": 8}' > "$tmp/gw.jsonl" || true
python3 - "$tmp/gw.jsonl" <<'PY' && pass "gateway: streamed NDJSON, the last line with finish_reason" || fail "gateway: $(head -c 400 "$tmp/gw.jsonl")"
import json, sys
lines = [json.loads(l)["result"] for l in open(sys.argv[1]) if l.strip()]
assert len(lines) >= 2 and lines[-1]["finish_reason"] == "length", lines
PY
before=$("$cli" --addr "$addr" sessions get alice | python3 -c 'import json, sys; print(json.load(sys.stdin)["position"])')

# Prometheus scrapes the three servers.
up=""
for _ in $(seq 60); do
  up=$(curl -s "127.0.0.1:$STEADY_PROMETHEUS_PORT/api/v1/query?query=sum(up)" |
    python3 -c 'import json, sys; r = json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)' 2> /dev/null || true)
  [ "$up" = "3" ] && break
  sleep 0.5
done
[ "$up" = "3" ] && pass "prometheus scrapes 3 of 3 servers' /metrics" || fail "prometheus: sum(up) = $up"

# Kill the server container serving alice (its lease, in Redis, names it); the session continues on
# another replica once the lease expires, from its last acknowledged turn.
"$cli" --addr "$addr" generate --session alice --prompt " and" --max-tokens 2 > /dev/null 2>&1
holder=$(podman exec "${project}_redis_1" sh -c 'k=$(redis-cli --raw KEYS "*:lease:alice"); [ -n "$k" ] && redis-cli --raw GET "$k"' | cut -d' ' -f1)
before=$("$cli" --addr "$addr" sessions get alice | python3 -c 'import json, sys; print(json.load(sys.stdin)["position"])')
if [ -n "$holder" ]; then
  podman kill "${project}_${holder}_1" > /dev/null && pass "killed $holder, which held alice"
else
  fail "no replica held alice's lease right after a turn"
fi
continued=""
for _ in $(seq 40); do
  if "$cli" --addr "$addr" --timeout 10 generate --session alice --prompt " Call" --max-tokens 3 > /dev/null 2> "$tmp/after.err"; then
    continued=yes
    break
  fi
  sleep 0.5
done
after=$("$cli" --addr "$addr" sessions get alice | python3 -c 'import json, sys; print(json.load(sys.stdin)["position"])')
[ -n "$continued" ] && [ "$after" -gt "$before" ] && pass "alice continued on another replica: position $before -> $after" \
  || fail "after the kill: $(cat "$tmp/after.err"), position $before -> $after"

"${compose[@]}" down -v > /dev/null 2>&1
left=$(podman ps -aq --filter "label=io.podman.compose.project=$project" | wc -l)
[ "$left" -eq 0 ] && ! podman volume exists "${project}_redis-data" && pass "down -v: no container or volume left" \
  || fail "down -v left $left containers"
echo "compose test: $(($(date +%s) - start)) s in all"
finish compose
