# Queue job (tools/gpu/queue.sh), session 33 — the record of a REJECTED experiment (its code, commit
# a2c9091, was reverted; docs/PERF.md "Session 33"): the one-token routing as ONE cluster kernel
# (PEREGRINE_MOE_ROUTE_CLUSTER = 8 / 16 blocks, moe_router.cu NormRouteClusterKernel) against
# NormLogits + the logits-form router kernel (the default, 0). Tests first (the new
# MoeExpertsOp.CudaClusterRouteChangesNoBit; the tiny GPU goldens with the cluster form on), then
# Qwen3-30B-A3B and DeepSeek-V2-Lite batch-1 x 1K rows, settings interleaved, two rounds (device time was short: rows first), and
# block traces of one Qwen3 step in both forms. orignl_moe_gpu_check: the same tree with
# NormLogitsKernel's text as before its register work moved into LoadWarpRows / NormDots
# (227 vs 229 registers): the refactor must not cost time.
# Make it: ninja -C build/cuda moe_gpu_check && ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh rc tools/gpu/jobs/rc.sh 400 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     trace_moe_gpu_check=build/trace/tests/models/moe_gpu_check orignl_moe_gpu_check=/tmp/moe_gpu_check_orignl
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "binaries of: $(cat "$JOB/commit" 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2; do
  ab_step "base" moe_gpu_check qwen3-30b-a3b
  ab_step "orig-nl" orignl_moe_gpu_check qwen3-30b-a3b
  ab_step "c16" moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_ROUTE_CLUSTER=16
  ab_step "c8" moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_ROUTE_CLUSTER=8
  ab_step "v-base" moe_gpu_check deepseek-v2-lite
  ab_step "v-orig-nl" orignl_moe_gpu_check deepseek-v2-lite
  ab_step "v-c16" moe_gpu_check deepseek-v2-lite PEREGRINE_MOE_ROUTE_CLUSTER=16
done
echo "== tests (default)"
ab_tests moe_gpu_check 'MoeExpertsOp.CudaClusterRoute*:MoeExpertsOp.RouteInside*:MoeRouterOp.*:GpuModelGolden.Tiny*'
echo "== tests (cluster 16)"
ab_tests moe_gpu_check 'MoeExpertsOp.RouteInside*:GpuModelGolden.Tiny*' PEREGRINE_MOE_ROUTE_CLUSTER=16
ab_trace t-base trace_moe_gpu_check qwen3-30b-a3b
ab_trace t-c16 trace_moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_ROUTE_CLUSTER=16
