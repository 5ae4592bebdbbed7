# (Ran a working-tree change reverted after it: the sorted-heads top-k, measured slower on
# Qwen3-30B-A3B; docs/PERF.md "Session 36".)
# Queue job (tools/gpu/queue.sh), session 36: the register router's top-k from sorted heads
# (moe_route.cuh RouteWarpLogits: each lane's candidates sorted once, each round pops the
# winner's head, instead of rescanning the lane's values every round; the same choices). The
# routing tests and the tiny models' HF goldens, then whole steps against the binary of the
# commit before (moe_gpu_check_old), interleaved, Qwen3-30B-A3B and DeepSeek-V2-Lite 1 x 1K.
# Make it (old = the parent commit's build, new = HEAD's):
#   ninja -C build/cuda moe_gpu_check   (at the parent: cp build/cuda/tests/models/moe_gpu_check /tmp/moe_gpu_check_old)
#   tools/gpu/make_job.sh s36f tools/gpu/jobs/s36f.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     moe_gpu_check_old=/tmp/moe_gpu_check_old
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
echo "== tests"
ab_tests moe_gpu_check 'MoeRouterOp.*:MoeExpertsOp.*:GpuModelGolden.Tiny*' | tail -4
ab_tests moe_gpu_check 'MoeExpertsOp.*:GpuModelGolden.TinyQwen3*' PEREGRINE_MOE_GU_ROUTES=1 | tail -2
echo "== rows"
for r in 1 2 3; do
  ab_step old-qwen3-30b-a3b moe_gpu_check_old qwen3-30b-a3b
  ab_step topk-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step old-deepseek-v2-lite moe_gpu_check_old deepseek-v2-lite
  ab_step topk-deepseek-v2-lite moe_gpu_check deepseek-v2-lite
done
