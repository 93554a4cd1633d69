#!/usr/bin/env bash
# Runs one fuzz target for SECONDS (default 600), from its checked-in corpus (docs/fuzzing.md):
#   tools/fuzz/run.sh snapshot_fuzz | generate_request_fuzz | tokenizer_fuzz | safetensors_fuzz | gguf_fuzz [SECONDS]
#   tools/fuzz/run.sh FuzzChatCompletions | FuzzCompletions | FuzzStrictJSONGenerateRequest [SECONDS]
#     (Go's native fuzzing of the gateway's JSON handling, clients/gateway/openai_fuzz_test.go)
# libFuzzer targets are built with clang, ASan and UBSan in build-fuzz/ (configured here the first
# time). New inputs are merged into a copy of the corpus in $TMPDIR; with --update-corpus, the minimized
# result replaces the checked-in corpus. Crashes are written to $TMPDIR/.../crashes and named on exit.
# Run from the source root after scripts/install-deps.sh (clang, libclang-rt-14-dev). Builds wait for
# the build lock ($STEADY_BUILD_LOCK, default /tmp/steady-build.lock, shared with other builds on a
# small machine); the fuzzer itself runs at nice 19 on one core.
set -euo pipefail
lock=${STEADY_BUILD_LOCK:-/tmp/steady-build.lock}
update=0
args=()
for a in "$@"; do
  if [ "$a" = --update-corpus ]; then update=1; else args+=("$a"); fi
done
target=${args[0]:?usage: tools/fuzz/run.sh TARGET [SECONDS] [--update-corpus]}
seconds=${args[1]:-600}
src=$(pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [[ $target == Fuzz* ]]; then
  # A Go fuzz function of the gateway (clients/gateway/*_fuzz_test.go), in the package as CMake
  # assembles it (GOPATH mode, offline). New interesting inputs stay in GOCACHE (a temp dir here); a
  # failing input is written to testdata/fuzz/$target and copied back beside the seeds.
  flock "$lock" cmake --build build --target steady-gateway > /dev/null
  pkg=build/gateway/src/steady/gateway
  goenv=(env GOPATH="$src/build/gateway:/usr/share/gocode" GO111MODULE=off GOPROXY=off GOFLAGS= GOCACHE="$work/gocache")
  # The instrumented test binary is compiled under the build lock (one input run), then reused from GOCACHE.
  (cd "$pkg" && flock "$lock" "${goenv[@]}" go test -run '^$' -fuzz "^$target\$" -fuzztime 1x . > "$work/build.log" 2>&1) ||
    { tail -30 "$work/build.log"; exit 1; }
  status=0
  (cd "$pkg" && "${goenv[@]}" nice -n 19 go test -run "^$target\$" -fuzz "^$target\$" -fuzztime "${seconds}s" -parallel 1 .) 2>&1 | tail -15 || status=$?
  if [ -d "$pkg/testdata/fuzz/$target" ]; then
    cp -n "$pkg/testdata/fuzz/$target"/* "clients/gateway/testdata/fuzz/$target/" 2> /dev/null || true
  fi
  exit $status
fi

if [ ! -f build-fuzz/CMakeCache.txt ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -DSTEADY_FUZZ=ON -DENABLE_CUDA=OFF -DSTEADY_BUILD_BENCHMARKS=OFF \
    > "$work/configure.log" || { cat "$work/configure.log"; exit 1; }
fi
flock "$lock" cmake --build build-fuzz -j"$(nproc)" --target "$target" steady_spm > "$work/build.log" || { tail -50 "$work/build.log"; exit 1; }

case $target in
  safetensors_fuzz) seeds=(tests/data/safetensors/valid tests/data/safetensors/malformed)
                    extra=(-dict=tests/data/safetensors/fuzz.dict) ;;
  *) seeds=(tests/fuzz/corpus/$target); extra=() ;;
esac
mkdir -p "$work/corpus" "$work/crashes"
for d in "${seeds[@]}"; do cp "$d"/* "$work/corpus/" 2> /dev/null || true; done
status=0
set -o pipefail
nice -n 19 build-fuzz/bin/"$target" "$work/corpus" "${extra[@]}" -max_total_time="$seconds" -print_final_stats=1 \
  -artifact_prefix="$work/crashes/" -rss_limit_mb=4096 2>&1 | grep -vE '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse) ' |
  tail -60 || status=$?
if [ -n "$(ls -A "$work/crashes")" ]; then
  mkdir -p "tests/fuzz/crashes/$target"
  cp "$work/crashes"/* "tests/fuzz/crashes/$target/"
  echo "crash reproducers copied to tests/fuzz/crashes/$target/"
  status=1
fi
if [ $update -eq 1 ] && [ "$target" != safetensors_fuzz ]; then
  mkdir -p "$work/min"
  nice -n 19 build-fuzz/bin/"$target" -merge=1 "$work/min" "$work/corpus" > /dev/null 2>&1
  rm -rf "tests/fuzz/corpus/$target" && mkdir -p "tests/fuzz/corpus/$target" && cp "$work/min"/* "tests/fuzz/corpus/$target/"
  echo "tests/fuzz/corpus/$target: $(ls "tests/fuzz/corpus/$target" | wc -l) inputs after merging"
fi
exit $status
