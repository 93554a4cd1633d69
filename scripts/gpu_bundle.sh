#!/usr/bin/env bash
# The GPU run's binaries (docs/cuda.md, "Running it on a GPU"). A lent GPU machine's image has the
# CUDA libraries but not Debian's absl, OpenBLAS, Highway or sentencepiece, and nothing can be
# installed there, so the binaries are built here and carried: one xz archive in OUT_DIR, the only
# file there (the run call carries ["gpu-bundle"]), holding
#   bin/      steady cuda_ops_test backend_test backend_cuda_test engine_test, stripped, RUNPATH
#             $ORIGIN/../lib
#   lib/      libsteady_spm.so, libcudart, and every library they load that is neither glibc's nor
#             cuBLAS's (absl, OpenBLAS and its libgfortran, Highway, sentencepiece, libstdc++...),
#             stripped, RUNPATH $ORIGIN: they load without LD_LIBRARY_PATH, which would also hand
#             this machine's older libstdc++ to the image's python3 and compute-sanitizer
#   MANIFEST  the commit, the libraries the image must provide (cuBLAS), the newest glibc symbol
#             version the files need, and each file's sha256
# Before archiving it checks that every file's dependencies resolve inside the bundle, to the
# image's CUDA libraries or to glibc (ld.so --list), as on an image without Debian's libraries.
#
#   scripts/gpu_bundle.sh [--no-build] [build-dir] [out-dir]      (defaults: build, gpu-bundle)
#
# --no-build: use the binaries as built (tests/cli/gpu_dry_run.sh); the archive is then remade only
# when a binary or library is newer than it. Prints the archive's path and size last.
set -euo pipefail
cd "$(dirname "$0")/.."
build_first=1
if [[ ${1:-} == --no-build ]]; then
  build_first=0
  shift
fi
BUILD=${1:-build}
OUT=${2:-gpu-bundle}
BINARIES=(steady cuda_ops_test backend_test backend_cuda_test engine_test)
ARCHIVE=$OUT/steady-gpu.tar.xz
STAGE=$PWD/$BUILD/gpu-bundle-stage
[[ $BUILD == /* ]] && STAGE=$BUILD/gpu-bundle-stage
# What the image provides: the driver's libcuda (loaded by libcudart at run time) and cuBLAS, whose
# libraries are hundreds of MB. libcudart is small and carried.
IMAGE_LIBS=(libcublas.so.13 libcublasLt.so.13)
CUDA_LIB=${CUDA_LIB:-/usr/local/cuda/lib}

die() {
  echo "gpu_bundle: $*" >&2
  exit 1
}

[[ -d $BUILD/kernels/cuda/CMakeFiles/steady_kernels_cuda.dir ]] ||
  die "$BUILD was not configured with the CUDA backend (nvcc not found?)"
if ((build_first)); then
  cmake --build "$BUILD" -j"$(nproc)" --target "${BINARIES[@]}" steady_spm > /dev/null
fi
inputs=()
for b in "${BINARIES[@]}"; do
  [[ -x $BUILD/bin/$b ]] || die "$BUILD/bin/$b is not built (cmake --build $BUILD --target $b)"
  inputs+=("$BUILD/bin/$b")
done
[[ -f $BUILD/lib/libsteady_spm.so ]] || die "$BUILD/lib/libsteady_spm.so is not built"
inputs+=("$BUILD/lib/libsteady_spm.so" "$0")

if [[ -f $ARCHIVE ]] && ((build_first == 0)); then
  newer=$(find "${inputs[@]}" -newer "$ARCHIVE" | head -n1)
  if [[ -z $newer ]]; then
    echo "gpu_bundle: $ARCHIVE is newer than every binary; kept"
    echo "$ARCHIVE $(stat -c %s "$ARCHIVE") bytes"
    exit 0
  fi
fi

rm -rf "$STAGE"
mkdir -p "$STAGE/bin" "$STAGE/lib"
for b in "${BINARIES[@]}"; do cp "$BUILD/bin/$b" "$STAGE/bin/"; done
cp "$BUILD/lib/libsteady_spm.so" "$STAGE/lib/"
# Every library the files load, under the name they ask for, except glibc's own and the image's.
is_glibc() {
  case $1 in
    linux-vdso.so* | libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux*) return 0 ;;
  esac
  return 1
}
is_image_lib() {
  local l
  for l in "${IMAGE_LIBS[@]}" libcuda.so.1; do [[ $1 == "$l" ]] && return 0; done
  return 1
}
ldd "$STAGE"/bin/* "$STAGE"/lib/* | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    is_glibc "$name" || is_image_lib "$name" || cp -L "$path" "$STAGE/lib/$name"
  done
strip --strip-unneeded "$STAGE"/lib/*
strip "$STAGE"/bin/*
patchelf --set-rpath '$ORIGIN/../lib' "$STAGE"/bin/*
for f in "$STAGE"/lib/*; do patchelf --set-rpath '$ORIGIN' "$f"; done

# The check: with only the image's cuBLAS on the search path (a folder of links to it, as the
# device's preflight in scripts/gpu_session.sh makes), each dependency must come from the bundle,
# from there, or be glibc's. A library found anywhere else (this machine's /lib/x86_64-linux-gnu)
# would be missing on the GPU image.
image_dir=$STAGE.image-libs
rm -rf "$image_dir"
mkdir -p "$image_dir"
for l in "${IMAGE_LIBS[@]}"; do
  [[ -e $CUDA_LIB/$l ]] || die "$CUDA_LIB/$l not found (set CUDA_LIB)"
  ln -s "$CUDA_LIB/$l" "$image_dir/$l"
done
bad=0
for f in "$STAGE"/bin/* "$STAGE"/lib/*; do
  while read -r name arrow path _; do
    [[ $arrow == "=>" ]] || continue
    if [[ $path == "not" ]]; then
      echo "gpu_bundle: $(basename "$f") needs $name, found nowhere" >&2
      bad=$((bad + 1))
    elif [[ $(realpath -m "$path") != "$STAGE"/lib/* && $path != "$image_dir"/* ]] && ! is_glibc "$name"; then
      echo "gpu_bundle: $(basename "$f") would load $name from $path, outside the bundle" >&2
      bad=$((bad + 1))
    fi
  done < <(env -i LD_LIBRARY_PATH="$image_dir" /lib64/ld-linux-x86-64.so.2 --list "$f" 2>&1)
done
rm -rf "$image_dir"
((bad == 0)) || die "$bad dependencies would be missing on an image without Debian's libraries"

glibc=$(for f in "$STAGE"/bin/* "$STAGE"/lib/*; do objdump -T "$f"; done | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -n1)
{
  echo "commit $(git rev-parse HEAD 2> /dev/null || echo unknown)$(git diff --quiet HEAD 2> /dev/null || echo ' (uncommitted changes)')"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), nvcc $("${CUDA_HOME:-/usr/local/cuda}"/bin/nvcc --version 2> /dev/null | grep -o 'release [0-9.]*' || echo '?'), kernels for $(grep -o 'arch=[^ ]*' "$BUILD/kernels/cuda/CMakeFiles/steady_kernels_cuda.dir/flags.make" | sort -u | tr '\n' ' ')"
  echo "image_libs ${IMAGE_LIBS[*]}"
  echo "glibc_needed ${glibc#GLIBC_}"
  (cd "$STAGE" && sha256sum bin/* lib/*)
} > "$STAGE/MANIFEST"

mkdir -p "$OUT"
find "$OUT" -mindepth 1 -delete  # the carried folder holds the archive alone
tar -C "$STAGE" -cf - MANIFEST bin lib | xz -T2 -6 > "$ARCHIVE.tmp"
mv "$ARCHIVE.tmp" "$ARCHIVE"
echo "gpu_bundle: $(du -sh "$STAGE" | cut -f1) of binaries and libraries, checked; glibc ${glibc#GLIBC_} needed"
echo "$ARCHIVE $(stat -c %s "$ARCHIVE") bytes"
