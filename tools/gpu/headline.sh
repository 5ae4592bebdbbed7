#!/usr/bin/env bash
# The headline GPU check of issues 6 + 7 in one device call, from prebuilt binaries (queue job:
# run.sh sources tools/gpu/queue_env.sh, then runs this): correctness first (GEMV / attention /
# MoE op harnesses, HF goldens, runner and sampler tests), then the decode / prefill figures
# of docs/PERF.md's headline tables, the serving-like capture (graph sets per kv bucket), and
# the PyTorch peer on the same shapes; a summary last. Binaries in $BIN: gemv_gpu_check,
# fattn_gpu_check, moe_gpu_check (each also runs `bench gpu-decode / gpu-prefill`).
# Here: cmake --build build/cuda -j2 --target gemv_gpu_check fattn_gpu_check moe_gpu_check
# Env: SKIP_TORCH=1, TORCH_BUDGET (s, default 150).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/headline}; mkdir -p "$OUT"
run() {  # name seconds command...
  local n=$1 t=$2; shift 2
  echo "== $n ($(date -u +%T)): $*"
  local t0=$SECONDS
  timeout "$t" stdbuf -oL -eL "$@" > "$OUT/$n.txt" 2>&1; echo "rc=$? took $((SECONDS - t0)) s" | tee -a "$OUT/$n.txt"
  grep -E "^\[  (FAILED|PASSED) |^\[  FAILED" "$OUT/$n.txt" | head -20
  # A failure's message and its scoped traces (the test's random seed: PG_SEED_TRACE).
  grep -A8 "Failure" "$OUT/$n.txt" | head -40
}
G=$BIN/gemv_gpu_check F=$BIN/fattn_gpu_check M=$BIN/moe_gpu_check
D="bench gpu-decode --load-format dummy --iters 20"
cfg() { echo configs/$1/config.json; }
DSV3_5L=$(tools/gpu/dsv3_5l.sh)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
# Correctness.
run gemv 120 $G --gtest_filter='-GpuModelGolden.SmolLM2Gguf'
run fattn 180 $F --gtest_filter='RopeKvWriteAttention.*:DecodeAttention.*:RopeKvWrite.*:AttentionOp.*:KvWriteFp8.*:GpuModelGolden.Tiny*:GpuRunner.*'
run moe 180 $M --gtest_filter='MoeRouterOp.*:MoeExpertsOp.*:MatmulFp8BlockOp*:GpuModelGolden.Tiny*'
# Headline decode / prefill figures (graphs captured at each point's context).
run llama_bf16 40 $G $D --model $(cfg llama-3.1-8b) --batch 1,2,4,8,32,128 --context 1024 --json $OUT/pg_decode_1k.json
run llama_32k 40 $G $D --model $(cfg llama-3.1-8b) --batch 1,8 --context 32768 --json $OUT/pg_decode_32k.json
run llama_fp8w 30 $G $D --model $(cfg llama-3.1-8b) --batch 1,4,8 --context 1024 --weight-dtype fp8
run qwen3moe 40 $M $D --model $(cfg qwen3-30b-a3b) --batch 1,2,4,8,32 --context 1024
run v2lite 40 $M $D --model $(cfg deepseek-v2-lite) --batch 1,8,32 --context 1024
run dsv3_5l 40 $M $D --model "$DSV3_5L" --batch 1,8,32 --context 1024
run prefill 60 $G bench gpu-prefill --model $(cfg llama-3.1-8b) --load-format dummy --prompt 8192,32768 --chunk 8192 --ttft-prefix 50000 --ttft-new 800
# Serving-like: graph sets captured up to 32K with the engine's kv buckets.
run serve_llama 60 $G $D --model $(cfg llama-3.1-8b) --batch 1,8 --context 1024,4096 --capture-context 32768
run serve_qwen3 60 $M $D --model $(cfg qwen3-30b-a3b) --batch 1,8 --context 1024,4096 --capture-context 32768
# PyTorch peer, same shapes (hand-written forward under a CUDA graph; torch.compile of a layer).
if [[ -z "${SKIP_TORCH:-}" ]]; then
  tb=${TORCH_BUDGET:-150}
  run torch_peer $((tb + 60)) python3 bench/torch_llama.py --config $(cfg llama-3.1-8b) --no-hf --prompts "" \
    --ttft-new 0 --points ${TORCH_POINTS:-1x1024,2x1024,4x1024,8x1024,128x1024,1x32768,8x32768} --compile --compile-scope layer \
    --budget-s $tb --json $OUT/torch.json
  python3 tools/gpu/peer_table.py $OUT $OUT/torch.json > $OUT/peer_table.txt 2>&1
fi
echo "==== summary"
for f in llama_bf16 llama_32k llama_fp8w qwen3moe v2lite dsv3_5l serve_llama serve_qwen3; do
  # rows: the bench rewrites its progress line with \r, so split on it first
  echo "--- $f"; tr '\r' '\n' < $OUT/$f.txt | grep -E "^ +[0-9]+ +[0-9]+ " | awk '!seen[$0]++'; grep "HBM" $OUT/$f.txt | head -1
done
echo "--- prefill"; grep -v "info\]" $OUT/prefill.txt | tail -8
[[ -f $OUT/peer_table.txt ]] && { echo "--- peer"; cat $OUT/peer_table.txt; }
