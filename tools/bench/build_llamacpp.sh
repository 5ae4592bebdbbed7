#!/usr/bin/env bash
# Build llama.cpp (llama-server, llama-bench) beside Peregrine as a peer for benchmarks.
#
# Source: the llama-cpp-python sdist from PyPI, whose vendor/llama.cpp is llama.cpp itself.
# Result: $PEER_DIR/build/bin/{llama-server,llama-bench}. Nothing is written inside the repo.
# Idempotent: an existing source tree is reused, and CMake/Ninja rebuild only what changed.
#
# Environment: PEER_DIR (default /work/peers/llama.cpp), JOBS (default 2),
#              LLAMA_CPP_PYTHON_VERSION (optional pin, e.g. 0.3.16),
#              LLAMA_ISA=avx2: build for an AVX2 CPU without AVX-512 into $PEER_DIR/build-avx2
#              (the peer for Peregrine's PEREGRINE_CPU_ISA=avx2 runs).
set -euo pipefail
PEER_DIR="${PEER_DIR:-/work/peers/llama.cpp}"
JOBS="${JOBS:-2}"
PIN="${LLAMA_CPP_PYTHON_VERSION:+==${LLAMA_CPP_PYTHON_VERSION}}"
SRC="$PEER_DIR/src"
BUILD="$PEER_DIR/build"
isa_flags=(-DGGML_NATIVE=ON)
if [[ "${LLAMA_ISA:-native}" == avx2 ]]; then
  BUILD="$PEER_DIR/build-avx2"
  isa_flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
             -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF)
fi

log() { printf '[build_llamacpp] %s\n' "$*" >&2; }

mkdir -p "$PEER_DIR"
if [[ ! -f "$SRC/CMakeLists.txt" ]]; then
  dl="$PEER_DIR/sdist"
  mkdir -p "$dl"
  if ! ls "$dl"/llama_cpp_python-*.tar.gz >/dev/null 2>&1; then
    log "downloading the llama-cpp-python sdist"
    pip download --no-deps --no-binary :all: --dest "$dl" "llama-cpp-python${PIN}"
  fi
  tarball="$(ls "$dl"/llama_cpp_python-*.tar.gz | sort -V | tail -n1)"
  log "unpacking vendor/llama.cpp from $(basename "$tarball")"
  tmp="$(mktemp -d "$PEER_DIR/unpack.XXXXXX")"
  tar -xzf "$tarball" -C "$tmp"
  rm -rf "$SRC"
  mv "$tmp"/llama_cpp_python-*/vendor/llama.cpp "$SRC"
  rm -rf "$tmp"
fi

gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  log "configuring in $BUILD"
  cmake -S "$SRC" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    "${isa_flags[@]}" -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
fi
log "building llama-server and llama-bench with -j$JOBS"
cmake --build "$BUILD" --target llama-server llama-bench -j "$JOBS"
log "done: $BUILD/bin/llama-server $BUILD/bin/llama-bench"
