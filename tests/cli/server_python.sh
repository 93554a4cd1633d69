#!/usr/bin/env bash
# The independent Python client (tests/python/client_test.py) against a real steady-server, run with
# Debian's /usr/bin/python3 (python3-grpcio, python3-protobuf; the pyenv python3 has no grpc).
# Usage: server_python.sh BIN_DIR SOURCE_DIR
set -euo pipefail
if ! /usr/bin/python3 -c "import grpc, google.protobuf" 2> /dev/null; then
  echo "python3-grpcio / python3-protobuf missing: run scripts/install-deps.sh"
  exit 1
fi
exec timeout 300 /usr/bin/python3 "$2/tests/python/client_test.py" "$1" "$2"
