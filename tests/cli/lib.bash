# Shared by the command-line tests in tests/cli/*.sh (sourced, not a test itself: ctest runs *.sh).
# Each test: `source "$(dirname "$0")/lib.bash"`, then pass/fail per check and `finish NAME` last.
# A test's processes go in `started_pids` and are killed on exit with the temp dir `tmp`.

tmp=$(mktemp -d)
started_pids=()
passes=0
fails=0

pass() { echo "ok   - $1"; passes=$((passes + 1)); }
fail() { echo "FAIL - $1"; fails=$((fails + 1)); }

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

# finish NAME: the summary line ("N passed, M failed") and the exit status.
finish() {
  echo "$1: $passes passed, $fails failed"
  [ "$fails" -eq 0 ]
}
