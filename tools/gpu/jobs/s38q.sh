# Queue job (tools/gpu/queue.sh), written in session 38, not yet run (branch s38/gu-self-smemx:
# main + NormLogits' late trigger + the self-routing gate/up blocks reading x from shared memory,
# staged by warps 1.. while warp 0 routes; PEREGRINE_MOE_GU_SELF_SMEMX=1). s38j / s38k: the
# self-routing gate/up kernel's slow rows sit on SMs still holding NormLogits' blocks at its
# dispatch, with the ring kernels' small L1, and its warps re-read x through L1; with x in shared
# memory the L1 split should not matter. Rows: main's router kernel against self-routing + late
# trigger with and without smem-x, three rounds after a warm-up (Qwen3-30B-A3B, DeepSeek-V2-Lite
# at batch 1 takes the flat grid, which self-routing does not use); then the MoE tests (the
# route-inside test runs smem-x with and without the down kernel's preload) and a trace.
# Make it on that branch:
#   ninja -C build/cuda moe_gpu_check && ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh s38q tools/gpu/jobs/s38q.sh 360 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     moe_trace=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
S="PEREGRINE_MOE_GU_ROUTES=1 PEREGRINE_MOE_NL_LATE_TRIGGER=1"
ab_step warmup moe_gpu_check qwen3-30b-a3b
for r in 1 2 3; do
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step selflate-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b $S
  ab_step selflatesx-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b $S PEREGRINE_MOE_GU_SELF_SMEMX=1
  ab_step selfsx-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_GU_ROUTES=1 PEREGRINE_MOE_GU_SELF_SMEMX=1
done
echo "== tests"
AB_TEST_TIMEOUT=200 ab_tests moe_gpu_check 'MoeExpertsOp.*:MoeRouterOp.*:GpuModelGolden.Tiny*' | tail -3
AB_TRACE_PHASES=0 ab_trace selflatesx moe_trace qwen3-30b-a3b $S PEREGRINE_MOE_GU_SELF_SMEMX=1 | command grep -v -E '^ +1 +1024' | command sed -n '1,14p'
