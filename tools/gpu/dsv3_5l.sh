#!/usr/bin/env bash
# Writes DeepSeek-V3's config cut to 5 layers (the GPU jobs' DeepSeek-V3-shaped model that fits
# one card) to /tmp/dsv3_5l/config.json, once, and prints that path. Run from the repo root.
set -euo pipefail
cfg=/tmp/dsv3_5l/config.json
if [[ ! -f "$cfg" ]]; then
  mkdir -p "$(dirname "$cfg")"
  python3 -c 'import json, sys; c = json.load(open("configs/deepseek-v3/config.json")); c["num_hidden_layers"] = 5; json.dump(c, open(sys.argv[1], "w"))' "$cfg"
fi
echo "$cfg"
