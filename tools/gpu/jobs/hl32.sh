# Queue job (tools/gpu/queue.sh), session 32: the headline (tools/gpu/headline.sh, no PyTorch
# peer) of main with the exchange form's per-plan default (8fe2465) and the harness's run count
# mended (ab7f6e0), after three interleaved rounds of batch-1 x 1K step rows, default against
# PG_FUSED_XW=0, on Qwen3-30B-A3B and Llama-3.1-8B (the default's check on this machine).
# Make it: cmake --build build/cuda -j2 --target gemv_gpu_check fattn_gpu_check moe_gpu_check
#   tools/gpu/make_job.sh hl32 tools/gpu/jobs/hl32.sh 560 gemv_gpu_check=build/cuda/tests/models/gemv_gpu_check \
#     fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "binaries of: $(cat "$JOB/commit" 2>/dev/null)"
echo "== step rows, batch 1 x 1K"
for r in 1 2 3; do
  ab_step "default-qwen3" moe_gpu_check qwen3-30b-a3b
  ab_step "xw0-qwen3" moe_gpu_check qwen3-30b-a3b PG_FUSED_XW=0
  ab_step "default-llama" fattn_gpu_check llama-3.1-8b
  ab_step "xw0-llama" fattn_gpu_check llama-3.1-8b PG_FUSED_XW=0
done
env | grep -E '^(PEREGRINE|PG)_' | sort | sed 's/^/switch: /'
SKIP_TORCH=1 OUT="$OUT/hl" bash tools/gpu/headline.sh
