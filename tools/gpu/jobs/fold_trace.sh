# Queue job (tools/gpu/queue.sh): block timelines (-DPEREGRINE_BLOCK_TRACE=ON build) of one
# (Record only: the folded router measured slower and was reverted, docs/PERF.md "Session 28";
# its binaries come from commits 6eabba6 / fa45d1e.)
# Qwen3-30B-A3B 1 x 1K step with the folded router off / on (PEREGRINE_MOE_FOLD_ROUTER; session
# 28), per kernel kind the critical-path increment and the phases; then the router harness.
# Make it: ninja -C build/trace moe_gpu_check && ninja -C build/cuda moe_gpu_check
#   tools/gpu/make_job.sh fold_trace tools/gpu/jobs/fold_trace.sh 240 \
#     trace_moe_gpu_check=build/trace/tests/models/moe_gpu_check new_moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_tests new_moe_gpu_check 'MoeRouterOp.Fold*'
export AB_TRACE_LAUNCHES=1
ab_trace off trace_moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_FOLD_ROUTER=0
ab_trace on trace_moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_FOLD_ROUTER=1
