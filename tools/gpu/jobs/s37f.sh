# (Measured slower; the code is on branch s37/route-flag: check it out to rebuild. docs/PERF.md "Session 37".)
# Queue job (tools/gpu/queue.sh), session 37: the gate/up kernel polling the router kernel's
# ready flag instead of waiting for its completion (PEREGRINE_MOE_ROUTE_FLAG=1,
# MoeRouterArgs::ready / MoeWalkArgs::ready): the router kernel's PDL release (~1.1 us) and the
# ids' read after it leave the critical path at one token. Qwen3-30B-A3B, DeepSeek-V2-Lite,
# Moonlight 1 x 1K, a warm-up step, three interleaved rounds; the MoE op tests and the tiny
# models' goldens with the flag on; block traces of Qwen3 with and without.
# Make it at HEAD (with the trace build's moe_gpu_check as moe_trace):
#   ninja -C build/cuda moe_gpu_check && ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh s37f tools/gpu/jobs/s37f.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     moe_trace=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
echo "== tests (flag on)"
ab_tests moe_gpu_check 'MoeExpertsOp.*:MoeRouterOp.*' PEREGRINE_MOE_ROUTE_FLAG=1 | tail -3
ab_tests moe_gpu_check 'GpuModelGolden.Tiny*' PEREGRINE_MOE_ROUTE_FLAG=1 | tail -3
ab_step warmup moe_gpu_check qwen3-30b-a3b
for r in 1 2 3; do
  for m in qwen3-30b-a3b deepseek-v2-lite moonlight-16b-a3b; do
    ab_step "base-$m" moe_gpu_check "$m"
    ab_step "flag-$m" moe_gpu_check "$m" PEREGRINE_MOE_ROUTE_FLAG=1
  done
done
AB_TRACE_PHASES=40 ab_trace base moe_trace qwen3-30b-a3b | head -24
AB_TRACE_PHASES=40 ab_trace flag moe_trace qwen3-30b-a3b PEREGRINE_MOE_ROUTE_FLAG=1 | head -24
