#!/usr/bin/env bash
# Replicas sharing sessions through Redis behind nginx (tests/python/replicas_test.py): routing by
# session through the gateway, kill -9 of a replica under load, a rolling restart, split brain, Redis
# killed and restarted. Real processes on 127.0.0.1, started and killed by the harness.
# Usage: replicas.sh BIN_DIR SOURCE_DIR
set -euo pipefail
for tool in redis-server nginx; do
  command -v "$tool" > /dev/null || { echo "$tool missing: run scripts/install-deps.sh"; exit 1; }
done
[ -x "$1/steady-gateway" ] || { echo "steady-gateway not built (no Go): run scripts/install-deps.sh"; exit 1; }
# grpcio logs every 502 page nginx answers while a replica is down; the harness prints what matters.
exec timeout 900 /usr/bin/python3 "$2/tests/python/replicas_test.py" "$1" "$2" 2> >(grep -v hpack_parser >&2)
