#!/usr/bin/env bash
# The dependency direction of docs/architecture.md, checked on every #include "..." of the tree:
# each folder includes only itself and the layers below it.
# Usage: layering.sh BIN_DIR SOURCE_DIR
set -euo pipefail
src=$2
source "$(dirname "$0")/lib.bash"

# folder -> the first path components its quoted includes may start with ("steady" is the generated
# API code, steady/v1/inference.pb.h; "absl" is Debian's absl).
declare -A allowed=(
  [base]="base absl"
  [kernels]="kernels base"
  [model]="model kernels base absl"
  [server]="server model base absl steady"
  [clients]="clients base absl steady"
  [tools]="tools server model kernels base absl"  # kernels: the kernel benchmarks (tools/bench)
)

for folder in "${!allowed[@]}"; do
  bad=0
  while IFS= read -r -d '' file; do
    while IFS= read -r line; do
      target=${line#*\"}
      target=${target%%\"*}
      top=${target%%/*}
      [ "$top" = "$target" ] && top=""  # a bare file name belongs to no layer: refused
      ok=0
      for a in ${allowed[$folder]}; do [ "$top" = "$a" ] && ok=1; done
      if [ $ok -eq 0 ]; then
        fail "${file#"$src"/} includes \"$target\" (allowed for $folder/: ${allowed[$folder]})"
        bad=1
      fi
    done < <(grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "$file" || true)
  done < <(find "$src/$folder" -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' \) -print0)
  [ $bad -eq 0 ] && pass "$folder/ includes only ${allowed[$folder]}"
done

finish layering
