#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every test (GPU tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
ctest -j"$(nproc)" --output-on-failure --timeout 900
