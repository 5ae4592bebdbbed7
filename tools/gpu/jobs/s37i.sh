# (Measured slower; the code is on branch s37/route-flag: check it out to rebuild. docs/PERF.md "Session 37".)
# Queue job (tools/gpu/queue.sh), session 37: s37f's route flag, third form (relaxed polls 32 ns apart, then one fence): the router kernel
# sets it with one release (no fences of its own; the walk's down kernel clears it after its
# PdlWait), against the default; Qwen3-30B-A3B, DeepSeek-V2-Lite 1 x 1K, warm-up, three rounds;
# the MoE op tests and the tiny models' goldens with it on.
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check
#   tools/gpu/make_job.sh s37i tools/gpu/jobs/s37i.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
echo "== tests (flag on)"
ab_tests moe_gpu_check 'MoeExpertsOp.*:MoeRouterOp.*' PEREGRINE_MOE_ROUTE_FLAG=1 | tail -3
ab_tests moe_gpu_check 'GpuModelGolden.Tiny*' PEREGRINE_MOE_ROUTE_FLAG=1 | tail -3
ab_step warmup moe_gpu_check qwen3-30b-a3b
for r in 1 2 3; do
  for m in qwen3-30b-a3b deepseek-v2-lite; do
    ab_step "base-$m" moe_gpu_check "$m"
    ab_step "flag-$m" moe_gpu_check "$m" PEREGRINE_MOE_ROUTE_FLAG=1
  done
done
