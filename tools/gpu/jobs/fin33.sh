# Queue job (tools/gpu/queue.sh), session 33's last call: the GPU tests of main after the helper's
# CPU MLA change (MlaAttentionParams' split Q8_0 form w_k_b / w_v_b: the CUDA backend must keep
# declining it and the device goldens must hold) and the revert of the cluster router; batch-1
# x 1K rows of the two MoE models, two rounds.
# Make it: ninja -C build/cuda moe_gpu_check mla_gpu_check
#   tools/gpu/make_job.sh fin33 tools/gpu/jobs/fin33.sh 200 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     mla_gpu_check=build/cuda/tests/models/mla_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "binaries of: $(cat "$JOB/commit" 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== tests"
ab_tests mla_gpu_check 'MlaAttentionOp.*:MlaCacheWrite*:GpuModelGolden.TinyDeepseek*' | tail -14
ab_tests moe_gpu_check 'MoeRouterOp.*:MoeExpertsOp.*:MatmulFp8BlockOp*:GpuModelGolden.Tiny*' | tail -6
for r in 1 2; do
  ab_step qwen3 moe_gpu_check qwen3-30b-a3b
  ab_step v2lite moe_gpu_check deepseek-v2-lite
done
