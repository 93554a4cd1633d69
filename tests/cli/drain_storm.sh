#!/usr/bin/env bash
# A storm of one-call connections (as nginx makes them) at steady-server through its SIGTERM drain,
# three times in the clear and once over TLS: no call may fail after it was sent
# (tests/python/drain_test.py). Debian's /usr/bin/python3
# (python3-grpcio; the pyenv python3 has no grpc). Usage: drain_storm.sh BIN_DIR SOURCE_DIR
set -euo pipefail
if ! /usr/bin/python3 -c "import grpc" 2> /dev/null; then
  echo "python3-grpcio missing: run scripts/install-deps.sh"
  exit 1
fi
source "$2/tests/cli/certs.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make_certs "$tmp/certs"
timeout 300 /usr/bin/python3 "$2/tests/python/drain_test.py" "$1" "$2" 3 "$tmp/certs"
