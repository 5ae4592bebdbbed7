#!/usr/bin/env bash
# `bench agentic --preset cpu` against `peregrine serve` and llama-server, one after the other
# in one run, on the same GGUF and the same saved dataset (so both replay the same
# conversations), then one overlay plot.
#
#   tools/bench/side_by_side_cpu.sh PEREGRINE_BIN DATASET_JSON OUT_DIR [CONVERSATIONS]
# CONVERSATIONS: per level for concurrency 1,2,4 (default 1,2,4). llama-server is the build of
# tools/bench/build_llamacpp.sh, run with --no-repack (AMX repack segfaults here, docs/bench.md),
# -np 4 slots of 4,096 tokens, LLAMA_THREADS threads (default 1: ggml's spinning barriers are
# pathological on this shared 2-core machine, docs/bench.md). Ours runs with THREADS (default 2).
set -euo pipefail
bin=$1; dataset=$2; out=$3; convs=${4:-1,2,4}
model=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
llama=${LLAMA_SERVER:-/work/peers/llama.cpp/build/bin/llama-server}
port=${PORT:-8139}
mkdir -p "$out"
srv=
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null || true' EXIT
wait_healthy() {
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && return; sleep 0.5; done
  echo "server did not start" >&2; exit 1
}
run_bench() {  # $1: name
  echo "$1 start: $(uptime)" | tee -a "$out/load.txt"
  "$bin" bench agentic --url "http://127.0.0.1:$port" --preset cpu --dataset "$dataset" \
    --conversations "$convs" --no-progress -o "$out/$1.json" | tee "$out/$1.txt"
  echo "$1 end: $(uptime)" | tee -a "$out/load.txt"
  kill -TERM "$srv"; wait "$srv" || true; srv=
}

"$bin" serve --model "$model" --port "$port" -t "${THREADS:-2}" > "$out/server_peregrine.log" 2>&1 &
srv=$!; wait_healthy; run_bench peregrine

"$llama" -m "$model" --host 127.0.0.1 --port "$port" -c 16384 -np 4 -t "${LLAMA_THREADS:-1}" \
  -tb "${LLAMA_THREADS:-1}" --no-repack > "$out/server_llamacpp.log" 2>&1 &
srv=$!; wait_healthy; run_bench llamacpp

python3 "$(dirname "$0")/plot_agentic.py" "$out/peregrine.json" --label peregrine \
  --compare "$out/llamacpp.json" --compare-label "llama.cpp" --out-dir "$out/plots"
