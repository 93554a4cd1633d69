# Shared by the command-line tests in tests/cli/*.sh (sourced, not a test itself: ctest runs *.sh).
# Each test: `source "$(dirname "$0")/lib.bash"`, then pass/fail per check and `finish NAME` last.
# A test's processes go in `started_pids` and are killed on exit with the temp dir `tmp`.

# Without it (TMPDIR naming a folder that does not exist) every "$tmp/..." would land in /.
tmp=$(mktemp -d) && [[ -d $tmp ]] || { echo "FAIL - mktemp -d failed (TMPDIR=${TMPDIR:-unset})" >&2; exit 1; }
started_pids=()
passes=0
fails=0

pass() { echo "ok   - $1"; passes=$((passes + 1)); }
fail() { echo "FAIL - $1"; fails=$((fails + 1)); }

# expect_error NAME NEEDLE CMD...: the command must fail (non-zero) and say NEEDLE on stderr
# (bench_test.sh has its own, which also checks the exit status).
expect_error() {
  local name=$1 needle=$2
  shift 2
  if "$@" > "$tmp/out" 2> "$tmp/err"; then
    fail "$name: succeeded but should have failed"
  elif grep -qF -- "$needle" "$tmp/err"; then
    pass "$name"
  else
    fail "$name: error did not mention '$needle': $(cat "$tmp/err")"
  fi
}

# stop PID: kills a process this script started, if it still runs.
stop() {
  if [ -n "${1:-}" ] && kill -0 "$1" 2> /dev/null; then
    kill -KILL "$1" 2> /dev/null || true
    wait "$1" 2> /dev/null || true
  fi
}
cleanup() {
  for pid in "${started_pids[@]}"; do stop "$pid"; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# wait_for_line LOG PID SED_EXPR: prints what SED_EXPR extracts from LOG once it appears (at most
# 30 s, or until PID exits).
wait_for_line() {
  local value=""
  for _ in $(seq 300); do
    value=$(sed -n "$3" "$1" 2> /dev/null)  # the log may not exist yet
    [ -n "$value" ] && break
    kill -0 "$2" 2> /dev/null || break
    sleep 0.1
  done
  echo "$value"
}

# Extra flags, empty unless a test sets them: gateway_flags for serve_gateway's steady-gateway
# (--tls-cert, --upstream-ca, ...), curl_flags for call's and check's curl (--cacert, -H ...).
gateway_flags=()
curl_flags=()

# serve_gateway BIN MODEL_DIR [steady-server flags...]: steady-server on a free port and steady-gateway
# in front of it with $gateway_flags (logs in $tmp/server.log, $tmp/gateway.log), stopped on exit;
# sets server_pid, gateway_pid, port (gRPC) and url (http://127.0.0.1:PORT, or https:// with
# --tls-cert). Exits when either does not start.
serve_gateway() {
  local bin=$1 model=$2 http_url
  shift 2
  "$bin/steady-server" --model "$model" --port 0 "$@" 2> "$tmp/server.log" &
  server_pid=$!
  started_pids+=("$server_pid")
  port=$(wait_for_line "$tmp/server.log" "$server_pid" 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p')
  [ -n "$port" ] || { echo "steady-server did not start:"; cat "$tmp/server.log"; exit 1; }
  "$bin/steady-gateway" --grpc-addr "127.0.0.1:$port" --http-port 0 "${gateway_flags[@]}" 2> "$tmp/gateway.log" &
  gateway_pid=$!
  started_pids+=("$gateway_pid")
  http_url=$(wait_for_line "$tmp/gateway.log" "$gateway_pid" 's|.*listening on \(https\{0,1\}://127\.0\.0\.1:[0-9]*\).*|\1|p')
  [ -n "$http_url" ] || { echo "steady-gateway did not start:"; cat "$tmp/gateway.log"; exit 1; }
  url=$http_url
}

# HTTP checks against $url (serve_gateway).
# call METHOD PATH [BODY]: the response body goes to $tmp/body, the HTTP status to stdout.
call() {
  local args=(-s -o "$tmp/body" -w '%{http_code}' -X "$1" --max-time 60 "${curl_flags[@]}")
  [ $# -ge 3 ] && args+=(-H 'Content-Type: application/json' --data-binary "$3")
  curl "${args[@]}" "$url$2" || echo "curl-failed"
}
# check NAME WANT_STATUS METHOD PATH [BODY] -- PYTHON: the call must answer WANT_STATUS and the
# Python expression (over `b`, the parsed JSON body) must hold.
check() {
  local name=$1 want=$2 method=$3 path=$4 body="" got
  shift 4
  if [ "$1" != "--" ]; then body=$1; shift; fi
  shift
  if [ -n "$body" ]; then got=$(call "$method" "$path" "$body"); else got=$(call "$method" "$path"); fi
  if [ "$got" = "$want" ] && python3 -c "import json, sys; b = json.load(open(sys.argv[1])); assert $1, b" \
       "$tmp/body" 2> "$tmp/assert"; then
    pass "$name"
  else
    fail "$name: HTTP $got, body $(head -c 500 "$tmp/body"), $(tail -n 1 "$tmp/assert")"
  fi
}

# finish NAME: the summary line ("N passed, M failed") and the exit status.
finish() {
  echo "$1: $passes passed, $fails failed"
  [ "$fails" -eq 0 ]
}

# skip_without_node: exit 77 (a visible skip) where node or npm is missing.
skip_without_node() {
  if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
    echo "SKIP: needs node and npm (scripts/install-deps.sh)"
    exit 77
  fi
}
