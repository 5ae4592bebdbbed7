# Queue job (tools/gpu/queue.sh), session 32's last call: the GPU tests of main at its end (the
# helpers' CPU changes share src/models with the GPU paths: HostPackedModel, the deepseek2 GGUF
# loader) and batch-1 x 1K rows of the two MoE models, three rounds.
# Make it: ninja -C build/cuda gemv_gpu_check fattn_gpu_check moe_gpu_check
#   tools/gpu/make_job.sh fin32 tools/gpu/jobs/fin32.sh 400 gemv_gpu_check=build/cuda/tests/models/gemv_gpu_check \
#     fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "binaries of: $(cat "$JOB/commit" 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== tests"
ab_tests gemv_gpu_check '-GpuModelGolden.SmolLM2Gguf' | tail -4
ab_tests fattn_gpu_check 'RopeKvWriteAttention.*:DecodeAttention.*:RopeKvWrite.*:AttentionOp.*:KvWriteFp8.*:GpuModelGolden.Tiny*:GpuRunner.*' | tail -4
ab_tests moe_gpu_check 'MoeRouterOp.*:MoeExpertsOp.*:MatmulFp8BlockOp*:MlaAttentionOp.*:GpuModelGolden.Tiny*' | tail -6
for r in 1 2 3; do
  ab_step qwen3 moe_gpu_check qwen3-30b-a3b
  ab_step v2lite moe_gpu_check deepseek-v2-lite
  ab_step llama fattn_gpu_check llama-3.1-8b
done
