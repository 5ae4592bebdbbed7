# Queue job (tools/gpu/queue.sh): the MoE down kernel asking the L2 for the next layer's qkv
# weights once its blocks' loads have landed (session 27; MoeExpertsParams::l2_after,
# PEREGRINE_MOE_L2_AFTER_PCT = the share of each qkv block slice, default 0 = off), and the L2
# hint's shared form (L2After) on the 32K attention. Tests first, then batch-1 step rows: main
# before the change ("base", ba9acda) and the change at shares 0 / 12 / 25 / 50 / 100, three rounds,
# Qwen3-30B-A3B (next qkv) and DeepSeek-V2-Lite (next q + kv_a).
# Make it (here, from the repo root):
#   ninja -C build/cuda moe_gpu_check fattn_gpu_check
#   tools/gpu/make_job.sh qkv_l2 tools/gpu/jobs/qkv_l2.sh 400 new_moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     new_fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check && cp .gpuq/hl/bin/moe_gpu_check.xz .gpuq/qkv_l2/bin/base_moe_gpu_check.xz
# Device: run(command="QUEUE_BUDGET=420 JOBS=qkv_l2 tools/gpu/queue.sh >/dev/null 2>&1; tar -xzf
#   $OUT/qkv_l2.tgz -C $OUT; cat $OUT/qkv_l2/log.txt; python3 tools/gpu/ab_summary.py $OUT/qkv_l2/log.txt", carry=[".gpulib", ".gpuq/qkv_l2"]).
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "== tests"
ab_tests new_moe_gpu_check 'MoeExpertsOp.*:MoeRouterOp.*:GpuModelGolden.TinyQwen3Moe:GpuModelGolden.TinyDeepseekV3'
ab_tests new_fattn_gpu_check 'RopeKvWriteAttention.*'
echo "== step rows, batch 1 x 1K (us a step, floor/t)"
for r in 1 2 3; do
  for m in qwen3-30b-a3b deepseek-v2-lite; do
    ab_step "base-$m" base_moe_gpu_check "$m"
    for p in 0 12 25 50 100; do
      ab_step "qkv-$p-$m" new_moe_gpu_check "$m" PEREGRINE_MOE_L2_AFTER_PCT=$p
    done
  done
done
echo "== 1 x 32K: the attention's hint in its shared form (L2After)"
export AB_CONTEXT=32768 AB_TIMEOUT=90
for r in 1 2; do
  ab_step "32k-llama-3.1-8b" new_fattn_gpu_check llama-3.1-8b
  ab_step "32k-off-llama-3.1-8b" new_fattn_gpu_check llama-3.1-8b PEREGRINE_ATTN_L2_AFTER_PCT=0
done
