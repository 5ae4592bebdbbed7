# Queue job (tools/gpu/queue.sh), session 32. First session 31's unrun `xd` (folded in here: the
# exchange form's per-plan default: harness run 12, goldens, default against PG_FUSED_XW=0 on
# Qwen3 / Llama).
# Then the next layer's qkv asked of the L2 by the router's NormLogits kernel with an evict_last
# policy and a persisting L2 set-aside (PEREGRINE_L2_KEEP, PEREGRINE_L2_PERSIST_MB), so that the
# lines outlast the MoE expert streams (evict-first) up to the next qkv GEMV. Batch 1 x 1K rows,
# three interleaved rounds.
# Make it: cmake --build build/cuda -j2 --target fattn_gpu_check moe_gpu_check
#   tools/gpu/make_job.sh pk tools/gpu/jobs/pk.sh 560 fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check \
#     moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "binaries of: $(cat "$JOB/commit" 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
KEEP="PEREGRINE_L2_KEEP=1 PEREGRINE_L2_PERSIST_MB=24"
echo "== tests"
ab_tests fattn_gpu_check 'RopeKvWriteAttention.*:GpuModelGolden.Tiny*:GpuRunner.*'
ab_tests moe_gpu_check 'MoeExpertsOp.*:MoeRouterOp.*:GpuModelGolden.Tiny*'
echo "== tests, keep + router hint 100 %"
ab_tests moe_gpu_check 'MoeExpertsOp.*:MoeRouterOp.*:GpuModelGolden.Tiny*' $KEEP PEREGRINE_MOE_ROUTER_L2_PCT=100
echo "== the persisting limit"
env $KEEP PEREGRINE_MOE_ROUTER_L2_PCT=100 timeout 60 "$BIN/moe_gpu_check" bench gpu-decode --load-format dummy \
  --iters 5 --batch 1 --context 1024 --model configs/qwen3-30b-a3b/config.json 2>&1 | tr '\r' '\n' |
  grep -E '\[l2\]|^ +1 +1024 '
echo "== step rows, batch 1 x 1K"
for r in 1 2 3; do
  ab_step "default-qwen3" moe_gpu_check qwen3-30b-a3b
  ab_step "xw0-qwen3" moe_gpu_check qwen3-30b-a3b PG_FUSED_XW=0
  ab_step "default-llama" fattn_gpu_check llama-3.1-8b
  ab_step "xw0-llama" fattn_gpu_check llama-3.1-8b PG_FUSED_XW=0
  ab_step "r100-qwen3" moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_ROUTER_L2_PCT=100
  ab_step "k100p24-qwen3" moe_gpu_check qwen3-30b-a3b $KEEP PEREGRINE_MOE_ROUTER_L2_PCT=100
  ab_step "k100p0-qwen3" moe_gpu_check qwen3-30b-a3b PEREGRINE_L2_KEEP=1 PEREGRINE_MOE_ROUTER_L2_PCT=100
  ab_step "k50p24-qwen3" moe_gpu_check qwen3-30b-a3b $KEEP PEREGRINE_MOE_ROUTER_L2_PCT=50
  ab_step "k100p24d0-qwen3" moe_gpu_check qwen3-30b-a3b $KEEP PEREGRINE_MOE_ROUTER_L2_PCT=100 PEREGRINE_MOE_L2_AFTER_PCT=0
  ab_step "p24-qwen3" moe_gpu_check qwen3-30b-a3b $KEEP
  ab_step "default-v2" moe_gpu_check deepseek-v2-lite
  ab_step "k100p24-v2" moe_gpu_check deepseek-v2-lite $KEEP PEREGRINE_DSV3_MOE_HINT=1 PEREGRINE_MOE_ROUTER_L2_PCT=100 PEREGRINE_MOE_L2_AFTER_PCT=0
done
for x in default 0; do
  echo "== qwen3 sweep, PG_FUSED_XW=$x"
  env $([[ $x == 0 ]] && echo PG_FUSED_XW=0) timeout 60 "$BIN/moe_gpu_check" bench gpu-decode --load-format dummy \
    --iters 20 --batch 1,8,32 --context 1024,4096 --model configs/qwen3-30b-a3b/config.json 2>&1 |
    tr '\r' '\n' | grep -E "^ +(1|8|32) +(1024|4096) "
done
echo "== qwen3 sweep, keep + router 100 %"
env $KEEP PEREGRINE_MOE_ROUTER_L2_PCT=100 timeout 60 "$BIN/moe_gpu_check" bench gpu-decode --load-format dummy \
  --iters 20 --batch 1,8,32 --context 1024,4096 --model configs/qwen3-30b-a3b/config.json 2>&1 |
  tr '\r' '\n' | grep -E "^ +(1|8|32) +(1024|4096) "
