#!/usr/bin/env bash
# Installs every Debian 12 package Steady needs to build and test. Idempotent: installs only what is
# missing, so a machine that has everything runs no apt-get at all.
set -euo pipefail
packages=(
  g++ cmake pkgconf make git curl
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libsentencepiece-dev sentencepiece
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libopenblas-dev
  libhwy-dev  # Highway: the CPU kernels' SIMD, dispatched at run time (kernels/cpu/matmul.cc)
  clang libclang-rt-14-dev valgrind
  # Trainer (tools/train) and its smoke test: Debian's CPU PyTorch with OpenBLAS.
  python3-numpy python3-torch python3-sentencepiece libopenblas0-pthread
  # gRPC API: google/api/{annotations,http}.proto ship only with the grpc-gateway sources;
  # tests/python drives the server from Debian's python3 with grpcio and protobuf.
  golang-github-grpc-ecosystem-grpc-gateway-dev python3-grpcio python3-protobuf
  # HTTP/JSON gateway (clients/gateway, steady-gateway): Go, the gateway's protoc plugins
  # (protoc-gen-grpc-gateway, protoc-gen-swagger), protoc-gen-go 1.3.5 and the Go sources it builds from.
  golang-go golang-grpc-gateway golang-goprotobuf-dev golang-google-grpc-dev golang-google-genproto-dev
  python3-matplotlib  # load-test charts: tools/plot/plot_reports.py (tests/cli/loadtest_smoke.sh)
  # Replicas sharing sessions (docs/deployment.md): the Redis session store's client, and the Redis
  # server and nginx that the replica tests start on 127.0.0.1.
  libhiredis-dev redis-server nginx
  # Container images and the compose topology (docker/, tests/docker): podman with runc (crun fails on
  # cgroup v1 hosts), DNS between containers, mmdebstrap for the registry-free base image.
  podman runc podman-compose mmdebstrap golang-github-containernetworking-plugin-dnsname
  # OpenAI-compatible endpoints: the official `openai` npm package runs on Node (tests/node); the web
  # playground is tested in headless Chromium over the DevTools protocol (tests/browser).
  nodejs chromium python3-websocket
  # Security (docs/security.md): OpenSSL's libcrypto (API key hashes, signed snapshots) and the openssl
  # command the TLS tests make their certificates with.
  libssl-dev openssl
  # The GPU run (scripts/gpu_bundle.sh): binaries built here carried to a lent GPU machine with their
  # libraries, their RUNPATH set to the bundle's lib/ (patchelf), compressed with xz.
  patchelf xz-utils
  # Hugging Face tokenizer.json (model/text/hf/): PCRE2 runs the pre-tokenizers' split regexes with
  # Unicode properties, utf8proc does NFC/NFKC normalization.
  libpcre2-dev libutf8proc-dev
  # Chat templates: Python's Jinja2, rendering as transformers does, is the second reference of
  # tests/cli/hf_chat_templates.sh (tests/reference/transformers_render.py).
  python3-jinja2
  # The CPU kernels on AArch64 (tests/cli/arm64_kernels.sh): Debian's cross compiler, qemu-user to run
  # the tests, and the arm64 builds of Highway, OpenBLAS and GoogleTest beside the host's (multiarch).
  g++-aarch64-linux-gnu qemu-user libhwy-dev:arm64 libopenblas-dev:arm64 libgtest-dev:arm64
)
# Debian's nodejs comes without npm; a Node that brings its own (NodeSource) needs no npm package.
command -v npm > /dev/null || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  if [[ " ${missing[*]}" == *:arm64* ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $SUDO dpkg --add-architecture arm64  # the :arm64 packages come from the same Debian mirror
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
