# Queue job (tools/gpu/queue.sh), session 34's first call: session 33's unrun `fin33` (the MLA /
# MoE GPU tests after the CPU MLA split-form change; batch-1 x 1K rows of the two MoE models, two
# rounds) plus block traces of one Qwen3-30B-A3B and one DeepSeek-V2-Lite step with two middle
# layers' launches, the base for this session's bubble hunt.
# Make it: ninja -C build/cuda moe_gpu_check mla_gpu_check && ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh s34a tools/gpu/jobs/s34a.sh 200 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     mla_gpu_check=build/cuda/tests/models/mla_gpu_check trace_moe_gpu_check=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "binaries of: $(cat "$JOB/commit" 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2; do
  ab_step qwen3 moe_gpu_check qwen3-30b-a3b
  ab_step v2lite moe_gpu_check deepseek-v2-lite
done
echo "== tests"
ab_tests mla_gpu_check 'MlaAttentionOp.*:MlaCacheWrite*:GpuModelGolden.TinyDeepseek*' | tail -14
ab_tests moe_gpu_check 'MoeRouterOp.*:MoeExpertsOp.*:MatmulFp8BlockOp*:GpuModelGolden.Tiny*' | tail -6
AB_TRACE_LAUNCHES=1 ab_trace t-qwen3 trace_moe_gpu_check qwen3-30b-a3b
AB_TRACE_LAUNCHES=1 ab_trace t-v2lite trace_moe_gpu_check deepseek-v2-lite
