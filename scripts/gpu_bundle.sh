#!/usr/bin/env bash
# Collects what a lent GPU machine needs to run the GPU tests and `steady bench` without building
# there (its image has CMake, nvcc and the CUDA libraries but not Debian's absl, OpenBLAS or
# sentencepiece; docs/cuda.md): the binaries built here with the CUDA backend, and every shared
# library they load that is neither glibc's nor CUDA's.
#
#   scripts/gpu_bundle.sh [build-dir] [out-dir]     (defaults: build, gpu-bundle)
#
# Then on the GPU machine: BUNDLE=gpu-bundle scripts/gpu_check.sh, or scripts/gpu_session.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
OUT=${2:-gpu-bundle}
BINARIES=(cuda_ops_test backend_test engine_test steady)

if [[ ! -d $BUILD/kernels/cuda/CMakeFiles/steady_kernels_cuda.dir ]]; then
  echo "gpu_bundle: $BUILD was not configured with the CUDA backend (nvcc not found?)" >&2
  exit 1
fi
cmake --build "$BUILD" -j"$(nproc)" --target "${BINARIES[@]}" steady_spm >/dev/null
rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib"
for b in "${BINARIES[@]}"; do cp "$BUILD/bin/$b" "$OUT/bin/"; done
# The sentencepiece module is found next to the binaries' ../lib (model/text/tokenizer.cc).
cp "$BUILD/lib/libsteady_spm.so" "$OUT/lib/"
# Libraries other than glibc's and the CUDA toolkit's (present on the GPU image), under the
# names the binaries ask for.
ldd "$OUT"/bin/* "$OUT/lib/libsteady_spm.so" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    case $name in
      libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libcuda*|libcublas*|libcudart*) continue ;;
    esac
    cp -L "$path" "$OUT/lib/$name"
  done
du -sh "$OUT"
