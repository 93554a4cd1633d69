#!/usr/bin/env bash
# Keeps the Containerfiles from rotting where they cannot be built (docker/Containerfile.cuda needs
# NVIDIA's registry and a GPU): every path they copy exists, every build target and CMake option they
# name exists, and every flag their ENTRYPOINT and HEALTHCHECK pass is one the binaries accept.
# Usage: cuda_lint.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
source "$src/tests/cli/lib.bash"

targets=$(grep -rhoE 'add_(executable|library|custom_target)\(([A-Za-z0-9_-]+)' "$src" --include=CMakeLists.txt |
  sed -E 's/.*\(//' | sort -u)
options=$(grep -rhoE '(option|set)\((STEADY_[A-Z_]+|ENABLE_CUDA)' "$src" --include=CMakeLists.txt | sed -E 's/.*\(//' | sort -u)

for file in "$src/docker/Containerfile" "$src/docker/Containerfile.cuda"; do
  name=${file#"$src"/}
  bad=0
  # Paths copied from the build context, and the model the stage copies.
  while read -r path; do
    [ -e "$src/$path" ] || { fail "$name copies $path, which does not exist"; bad=1; }
  done < <(grep -E '^COPY ' "$file" | grep -v -- '--from=' | awk '{print $2}' | grep -v '^\.$'; grep -oE '/src/[A-Za-z0-9_./-]+' "$file" | sed 's|^/src/||' | sort -u)
  # Build targets.
  for t in $(grep -oE -- 'cmake --build [^&]*--target [A-Za-z0-9_ -]+' "$file" | sed 's/.*--target //'); do
    grep -qx -- "$t" <<< "$targets" || { fail "$name builds target $t, which CMake does not define"; bad=1; }
  done
  # CMake options (-DNAME=...), except CMake's own.
  for o in $(grep -oE -- '-D[A-Z_]+=' "$file" | sed -E 's/^-D|=$//g' | grep -v '^CMAKE_' | sort -u); do
    grep -qx -- "$o" <<< "$options" || { fail "$name sets -D$o, which no CMakeLists.txt declares"; bad=1; }
  done
  # steady-server and steady-cli flags in ENTRYPOINT / HEALTHCHECK.
  # (Every list is searched as a here-string, never piped from echo: `grep -q` leaving a pipe early
  # fails the writer with SIGPIPE under pipefail, and the suite once failed the target check so.)
  server_usage=$("$bin/steady-server" --help)
  for f in $(sed -n '/ENTRYPOINT \["steady-server"/,/\]/p' "$file" | grep -oE -- '"--[a-z-]+"' | tr -d '"' | sort -u); do
    grep -q -- "$f" <<< "$server_usage" || { fail "$name passes steady-server $f, which it does not accept"; bad=1; }
  done
  if grep -q 'steady-cli' "$file"; then
    "$bin/steady-cli" health --help > /dev/null || { fail "$name: steady-cli health is gone"; bad=1; }
  fi
  [ $bad -eq 0 ] && pass "$name: copied paths, targets, options and flags exist"
done

# The CUDA build's ARGs are used where they are declared.
for arg in $(grep -oE '^ARG [A-Z_]+' "$src/docker/Containerfile.cuda" | awk '{print $2}' | sort -u); do
  [ "$(grep -c "\${$arg}" "$src/docker/Containerfile.cuda")" -gt 0 ] && pass "Containerfile.cuda uses ARG $arg" \
    || fail "Containerfile.cuda declares ARG $arg and never uses it"
done
finish cuda_lint
