#!/usr/bin/env bash
# Makes the model goldens with HF transformers on the GPU machine.
# Usage (device tool, repo root): tools/gpu/golden.sh <out-dir> [tiny|smollm2]
# For smollm2 the GGUF must be at models/SmolLM2-135M-Instruct.Q4_1.gguf (it is larger than
# the device tool's 64 MiB transfer limit, so it travels in two parts: .xfer/a, .xfer/b).
set -euo pipefail
out="$1"; only="${2:-}"
if [[ -d .whl ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1
python3 tools/golden/make_model_goldens.py --out "$out" --only "$only"
