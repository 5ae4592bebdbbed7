# Queue job (tools/gpu/queue.sh), session 28: the GPU tests and the MoE batch-1 step rows after
# the router-from-o-dots path was removed (4b5b696; the remaining kernels' SASS unchanged), the
# binaries of 461788f beside them.
# Make it: ninja -C build/cuda gemv_gpu_check fattn_gpu_check moe_gpu_check
#   tools/gpu/make_job.sh post_dots tools/gpu/jobs/post_dots.sh 300 gemv_gpu_check=build/cuda/tests/models/gemv_gpu_check \
#     fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "== tests"
ab_tests moe_gpu_check 'MoeRouterOp.*:MoeExpertsOp.*:MatmulFp8BlockOp*:GpuModelGolden.Tiny*'
ab_tests gemv_gpu_check '-GpuModelGolden.SmolLM2Gguf'
ab_tests fattn_gpu_check 'GpuModelGolden.Tiny*:GpuRunner.*'
echo "== step rows, batch 1 x 1K"
for r in 1 2; do
  for m in qwen3-30b-a3b deepseek-v2-lite; do ab_step "new-$m" moe_gpu_check "$m"; done
done
