#!/usr/bin/env bash
# The official `openai` npm package (tests/node/openai_client.cjs) against steady-gateway and a real
# steady-server. The package is installed from the npm registry into a cache outside the source
# tree, pinned to 4.104.0: the newest line that runs on Debian 12's Node 18 (openai 7 needs Node 22).
# Exit 77 (a visible skip) without node and npm (scripts/install-deps.sh installs them).
# Usage: gateway_openai_node.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
source "$(dirname "$0")/lib.bash"
openai_version=4.104.0
skip_without_node
cache=${STEADY_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/steady/node}
if [ ! -f "$cache/node_modules/openai/package.json" ] ||
   ! grep -q "\"version\": \"$openai_version\"" "$cache/node_modules/openai/package.json"; then
  mkdir -p "$cache"
  # Into a temporary prefix first, then moved: an interrupted install leaves no half cache.
  timeout 300 npm install --prefix "$tmp/npm" --no-audit --no-fund --no-save --loglevel=error \
    "openai@$openai_version" > "$tmp/npm.log" 2>&1 || { echo "npm install openai@$openai_version failed:"; cat "$tmp/npm.log"; exit 1; }
  rm -rf "$cache/node_modules"
  mv "$tmp/npm/node_modules" "$cache/node_modules"
fi
"$bin/steady" init --out "$tmp/model" --preset tiny --tokenizer "$src/tests/data/tokenizer/tokenizer.model" \
  --mechanism taylor --order 2 > /dev/null
serve_gateway "$bin" "$tmp/model" --state-memory 16M
if NODE_PATH="$cache/node_modules" timeout 300 node "$src/tests/node/openai_client.cjs" "$url" model; then
  pass "the openai package's calls (above)"
else
  fail "the openai package's calls (above)"
fi
finish gateway_openai_node
