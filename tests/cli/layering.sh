#!/usr/bin/env bash
# The dependency direction of docs/architecture.md, checked on every #include "..." of the tree: each
# folder (a layer, or a subsystem inside one) includes only itself and what its row below allows.
# Then the checker is tried on small planted trees, so that an include against the direction is shown
# to fail it (an upward one, a sideways one, a file outside every folder).
# Usage: layering.sh BIN_DIR SOURCE_DIR
set -euo pipefail
src=$2
source "$(dirname "$0")/lib.bash"

# folder -> the prefixes its quoted includes may start with. A prefix "a/b" allows "a/b/..."; a file
# belongs to the longest folder that holds it ("model" holds only model/'s own top files, since every
# subfolder of model/ has its row). "steady" is the generated API (steady/v1/inference.pb.h), "absl"
# Debian's absl.
declare -A allowed=(
  [base]="base absl"
  [kernels]="kernels base"
  [model/text]="model/text base absl"
  [model/checkpoint]="model/checkpoint model/text base absl"
  [model/gguf]="model/gguf model/decoder model/mechanisms model/checkpoint model/text kernels base absl"
  [model/mechanisms]="model/mechanisms model/checkpoint kernels base absl"
  [model/sampling]="model/sampling base absl"
  [model/speculate]="model/speculate model/backend model/decoder model/text base absl"
  [model/constrain]="model/constrain model/text base absl"
  [model/decoder]="model/decoder model/mechanisms model/checkpoint kernels base absl"
  [model/backend]="model/backend model/decoder model/mechanisms model/checkpoint model/sampling kernels base absl"
  [model]="model kernels base absl"
  [server/store]="server/store model base absl"
  [server/engine]="server/engine server/store model base absl"
  [server/auth]="server/auth base absl"
  [server/metrics]="server/metrics server/engine server/store base absl"
  [server/rpc]="server model base absl steady"
  [clients]="clients base absl steady"
  [tools]="tools server model kernels base absl"  # kernels: the kernel benchmarks (tools/bench)
)
# The top folders whose every source file must belong to a row above.
roots="base kernels model server clients tools"

# owner FILE (relative): the longest folder of `allowed` that holds it, or nothing.
owner() {
  local dir=${1%/*} best=""
  [ "$dir" = "$1" ] && dir=""
  while [ -n "$dir" ]; do
    if [ -n "${allowed[$dir]+x}" ]; then best=$dir; break; fi
    [ "${dir%/*}" = "$dir" ] && break
    dir=${dir%/*}
  done
  echo "$best"
}

# check_tree ROOT: prints one line per include against the table (and per file no row holds).
check_tree() {
  local root=$1 file rel folder line target ok a
  while IFS= read -r -d '' file; do
    rel=${file#"$root"/}
    folder=$(owner "$rel")
    if [ -z "$folder" ]; then
      echo "$rel belongs to no folder of the table"
      continue
    fi
    while IFS= read -r line; do
      target=${line#*\"}
      target=${target%%\"*}
      ok=0
      for a in ${allowed[$folder]}; do
        case $target in "$a"/*) ok=1 ;; esac
      done
      [ $ok -eq 1 ] || echo "$rel includes \"$target\" (allowed for $folder/: ${allowed[$folder]})"
    done < <(grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "$file" || true)
  done < <(cd "$root" && find $roots -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' \) -printf "$root/%p\0" 2> /dev/null)
}

violations=$(check_tree "$src")
if [ -z "$violations" ]; then
  pass "every include of $roots follows docs/architecture.md's direction"
else
  while IFS= read -r v; do fail "$v"; done <<< "$violations"
fi

# The checker itself: planted trees that must fail, one reason each, and one that must pass.
plant() {  # plant DIR FILE INCLUDE
  mkdir -p "$1/$(dirname "$2")"
  printf '#include "%s"\n' "$3" > "$1/$2"
}
expect_caught() {  # expect_caught NAME FILE INCLUDE
  local dir=$tmp/planted-$1 out
  plant "$dir" "$2" "$3"
  out=$(check_tree "$dir")
  if [ -n "$out" ]; then pass "a planted $1 include is caught: $out"; else fail "a planted $1 include ($2 -> $3) passed"; fi
}
expect_caught upward server/store/leak.cc server/engine/engine.h
expect_caught sideways server/auth/leak.cc server/metrics/metrics.h
expect_caught model-upward model/text/leak.cc model/decoder/model.h
expect_caught clients-into-model clients/cli/leak.cc model/decoder/model.h
expect_caught bare-name kernels/cpu/leak.cc matmul.h
expect_caught unowned server/leak.cc base/check.h
plant "$tmp/planted-ok" server/engine/ok.cc server/store/session_store.h
plant "$tmp/planted-ok" model/generate_like.cc model/backend/backend.h
if [ -z "$(check_tree "$tmp/planted-ok")" ]; then pass "allowed includes pass the checker"; else fail "allowed includes were refused"; fi

finish layering
