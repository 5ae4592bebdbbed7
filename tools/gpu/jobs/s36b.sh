# (Ran binaries of branch s36/router-fold, 7891b0b / 3233f21; reverted on main as measured slower:
# docs/PERF.md "Session 36". The make commands below need that branch checked out.)
# Queue job (tools/gpu/queue.sh), session 36: the MoE router folded through the attention's
# projections (moe_device.h RouterFold, PEREGRINE_MOE_ROUTER_FOLD=1; off by default until
# measured): the side dots' and the folded router's GPU tests, the tiny models' HF goldens with
# the fold on (their one-token steps take it, on the composed kernels), then Qwen3-30B-A3B 1 x 1K
# base vs fold, interleaved, and the batch rows with the fold.
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check gemv_gpu_check
#   tools/gpu/make_job.sh s36b tools/gpu/jobs/s36b.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     gemv_gpu_check=build/cuda/tests/models/gemv_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
echo "== tests"
ab_tests gemv_gpu_check 'FusedMatmulOp.*:GemvRing.*:Bf16RingMma.*' | tail -8
ab_tests moe_gpu_check 'MoeRouterOp.*:MoeExpertsOp.*:GpuModelGolden.Tiny*' | tail -8
ab_tests moe_gpu_check 'GpuModelGolden.Tiny*' PEREGRINE_MOE_ROUTER_FOLD=1 | tail -8
echo "== rows"
for r in 1 2 3; do
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step fold-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_ROUTER_FOLD=1
done
ab_batches fold qwen3-30b-a3b 2,8 PEREGRINE_MOE_ROUTER_FOLD=1
ab_batches base qwen3-30b-a3b 2,8
