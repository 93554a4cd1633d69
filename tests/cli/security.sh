#!/usr/bin/env bash
# steady-server's security over real processes (docs/security.md): TLS and mutual TLS with
# certificates made now by openssl (tests/cli/certs.bash), refused plaintext, expired, wrong-host and
# untrusted-client cases; API keys with steady-cli and steady-loadtest; a key revoked by SIGHUP stops
# working at once while a stream already running finishes.
# Usage: security.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/certs.bash"
command -v openssl > /dev/null || { echo "SKIP: needs the openssl command (scripts/install-deps.sh)"; exit 77; }
make_certs "$tmp/pki"
pki=$tmp/pki

# serve NAME [flags...]: steady-server on a free port; sets $port_NAME.
serve() {
  local name=$1 p pid
  shift
  "$bin/steady-server" --model "$src/models/tiny-softmax" --mechanism taylor --order 2 --state-memory 64M --port 0 "$@" \
    2> "$tmp/$name.log" &
  pid=$!
  started_pids+=("$pid")
  p=$(wait_for_line "$tmp/$name.log" "$pid" 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p')
  [ -n "$p" ] || { echo "steady-server ($name) did not start:"; cat "$tmp/$name.log"; exit 1; }
  printf -v "port_$name" '%s' "$p"
  printf -v "pid_$name" '%s' "$pid"
}
# expect NAME WANT_RC GREP -- COMMAND...: COMMAND exits WANT_RC (0 or nonzero: "fail") and its
# output matches GREP.
expect() {
  local name=$1 want=$2 pattern=$3 rc=0
  shift 4
  timeout 60 "$@" > "$tmp/out" 2>&1 || rc=$?
  if { [ "$want" = 0 ] && [ $rc -eq 0 ]; } || { [ "$want" = fail ] && [ $rc -ne 0 ]; }; then
    if grep -q -- "$pattern" "$tmp/out"; then pass "$name"; return; fi
  fi
  fail "$name: exit $rc, $(head -c 400 "$tmp/out")"
}

cat > "$tmp/keys.json" << EOF
{"tenants": {
  "alice": {"keys_sha256": ["$(printf 'alice-key' | sha256sum | cut -d' ' -f1)"]},
  "bob": {"keys_sha256": ["$(printf 'bob-key' | sha256sum | cut -d' ' -f1)",
                          "$(printf 'bob-old-key' | sha256sum | cut -d' ' -f1)"], "max_concurrent_generates": 4}}}
EOF
grep -q alice-key "$tmp/keys.json" && fail "a plaintext key is on disk" || pass "the keys file holds hashes only"
head -c 32 /dev/urandom > "$tmp/snapshot.key"

serve mtls --tls-cert "$pki/server.pem" --tls-key "$pki/server.key" --tls-client-ca "$pki/ca.pem" \
  --api-keys "$tmp/keys.json" --snapshot-key-file "$tmp/snapshot.key"
cli=("$bin/steady-cli" --addr "127.0.0.1:$port_mtls" --timeout 30)
tls=(--tls-ca "$pki/ca.pem" --tls-cert "$pki/client.pem" --tls-key "$pki/client.key")

expect "mutual TLS with a key: a session" 0 '"session_id": "s"' -- "${cli[@]}" "${tls[@]}" --api-key alice-key sessions create --id s
expect "mutual TLS with a key: a stream" 0 "finish" -- "${cli[@]}" "${tls[@]}" --api-key alice-key generate --session s \
  --prompt "Once upon a time" --max-tokens 8
expect "\$STEADY_API_KEY is the default key" 0 '"session_id": "s"' -- env STEADY_API_KEY=alice-key "${cli[@]}" "${tls[@]}" sessions list
expect "no key: UNAUTHENTICATED" fail "UNAUTHENTICATED" -- "${cli[@]}" "${tls[@]}" sessions list
expect "an unknown key: UNAUTHENTICATED" fail "UNAUTHENTICATED" -- "${cli[@]}" "${tls[@]}" --api-key mallory sessions list
expect "another tenant's session: NOT_FOUND" fail "NOT_FOUND: session_id: no session s" -- \
  "${cli[@]}" "${tls[@]}" --api-key bob-key sessions get s
expect "plaintext to the TLS port is refused" fail "UNAVAILABLE" -- "${cli[@]}" --api-key alice-key sessions list
expect "TLS without a client certificate is refused (mutual TLS)" fail "UNAVAILABLE" -- \
  "${cli[@]}" --tls-ca "$pki/ca.pem" --api-key alice-key sessions list
expect "a client certificate from an untrusted CA is refused" fail "UNAVAILABLE" -- \
  "${cli[@]}" --tls-ca "$pki/ca.pem" --tls-cert "$pki/other-client.pem" --tls-key "$pki/other-client.key" \
  --api-key alice-key sessions list
expect "a server the client's CA did not sign is refused" fail "UNAVAILABLE" -- \
  "${cli[@]}" --tls-ca "$pki/other-ca.pem" --tls-cert "$pki/client.pem" --tls-key "$pki/client.key" \
  --api-key alice-key sessions list
expect "steady-loadtest with TLS and a key" 0 "completed" -- "$bin/steady-loadtest" --addr "127.0.0.1:$port_mtls" \
  "${tls[@]}" --api-key bob-key --concurrency 2 --requests 4 --prompt-tokens fixed:16 --output-tokens fixed:4
"${cli[@]}" "${tls[@]}" --api-key alice-key sessions export s "$tmp/s.snap" > /dev/null 2>&1
expect "another tenant's snapshot does not import" fail "PERMISSION_DENIED" -- \
  "${cli[@]}" "${tls[@]}" --api-key bob-key sessions import "$tmp/s.snap" --id mine
expect "the exporting tenant imports it" 0 '"session_id": "copy"' -- \
  "${cli[@]}" "${tls[@]}" --api-key alice-key sessions import "$tmp/s.snap" --id copy

# SIGHUP: bob's old key is revoked while a long stream of his runs; the stream finishes, the key fails.
old_hash=$(printf 'bob-old-key' | sha256sum | cut -d' ' -f1)
"${cli[@]}" "${tls[@]}" --api-key bob-old-key generate --prompt "A long story" --max-tokens 3000 \
  > "$tmp/stream.out" 2>&1 &
stream=$!
started_pids+=("$stream")
sleep 0.5
/usr/bin/python3 - "$tmp/keys.json" "$old_hash" << 'EOF'
import json, sys
keys = json.load(open(sys.argv[1]))
keys["tenants"]["bob"]["keys_sha256"].remove(sys.argv[2])
json.dump(keys, open(sys.argv[1] + ".new", "w"))
EOF
mv "$tmp/keys.json.new" "$tmp/keys.json"
kill -HUP "$pid_mtls"
wait_for_line "$tmp/mtls.log" "$pid_mtls" '/SIGHUP: reloaded/p' > /dev/null
expect "a revoked key fails at once after SIGHUP" fail "UNAUTHENTICATED" -- \
  "${cli[@]}" "${tls[@]}" --api-key bob-old-key sessions list
expect "the other keys still work" 0 "sessions" -- "${cli[@]}" "${tls[@]}" --api-key bob-key sessions list
if kill -0 "$stream" 2> /dev/null; then pass "the stream was still running at the reload"; else fail "the stream ended before the reload: make it longer"; fi
if wait "$stream" && grep -q "finish: length" "$tmp/stream.out"; then
  pass "a stream running at the reload finishes"
else
  fail "the running stream: $(tail -c 300 "$tmp/stream.out")"
fi
cp "$tmp/keys.json" "$tmp/keys.good"
echo '{broken' > "$tmp/keys.json"
kill -HUP "$pid_mtls"
wait_for_line "$tmp/mtls.log" "$pid_mtls" '/previous keys stay/p' > /dev/null
expect "a broken keys file on SIGHUP keeps the keys in force" 0 "sessions" -- \
  "${cli[@]}" "${tls[@]}" --api-key alice-key sessions list

# Server certificates the client must refuse: expired, and for another host.
serve expired --tls-cert "$pki/expired.pem" --tls-key "$pki/expired.key"
expect "an expired server certificate is refused" fail "UNAVAILABLE" -- \
  "$bin/steady-cli" --addr "127.0.0.1:$port_expired" --timeout 10 --tls-ca "$pki/ca.pem" sessions list
serve wronghost --tls-cert "$pki/wronghost.pem" --tls-key "$pki/wronghost.key"
expect "a certificate for another host is refused" fail "UNAVAILABLE" -- \
  "$bin/steady-cli" --addr "127.0.0.1:$port_wronghost" --timeout 10 --tls-ca "$pki/ca.pem" sessions list
expect "... and accepted when that host is the expected name" 0 "sessions" -- \
  "$bin/steady-cli" --addr "127.0.0.1:$port_wronghost" --timeout 10 --tls-ca "$pki/ca.pem" --tls-server-name wrong.example \
  sessions list

# Flags that do not go together, a bad keys file, and the warning for an open port.
expect "--tls-cert without --tls-key is refused" fail "go together" -- \
  "$bin/steady-server" --model "$src/models/tiny-softmax" --port 0 --tls-cert "$pki/server.pem"
expect "a bad keys file is refused naming it" fail "keys.json: not valid JSON" -- \
  "$bin/steady-server" --model "$src/models/tiny-softmax" --port 0 --api-keys "$tmp/keys.json"
# A non-loopback address that is nobody's (TEST-NET-1): the warning comes before the bind fails, and
# no port opens beyond loopback.
"$bin/steady-server" --model "$src/models/tiny-softmax" --port 0 --host 192.0.2.1 > "$tmp/open.log" 2>&1 || true
grep -q "WARNING: listening on 192.0.2.1 without TLS" "$tmp/open.log" && pass "a non-loopback plaintext address logs a warning" \
  || fail "no warning: $(cat "$tmp/open.log")"
finish security
