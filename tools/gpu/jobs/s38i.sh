# Queue job (tools/gpu/queue.sh), session 38: the flat gate/up grid's deal weighted by cost
# (PEREGRINE_MOE_GU_SHARED_COST = MoeTuning::walk_gu_shared_cost, percent of a routed item's
# cost for a shared item). s38e's trace of DeepSeek-V2-Lite: the blocks holding the shared
# slots' items (L2-prefetched before PdlWait) end at a median 26.2-26.6 us after the wait, the
# routed ones at 27.0-31.1: equal shares of items leave them idle at the end. Three rounds after
# a warm-up, DeepSeek-V2-Lite and Moonlight at 100 (as main) / 75 / 60 / 45; then the tests
# (CudaFlatGateUpChangesNoBit deals at 60 and 37 %) and the tiny goldens at 60.
# (Ran in session 38, measured slower; the code is on branch s38/gu-shared-cost.)
# Make it on that branch:
#   ninja -C build/cuda moe_gpu_check
#   tools/gpu/make_job.sh s38i tools/gpu/jobs/s38i.sh 360 moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ab_step warmup moe_gpu_check deepseek-v2-lite
for r in 1 2 3; do
  for m in deepseek-v2-lite moonlight-16b-a3b; do
    ab_step "base-$m" moe_gpu_check "$m"
    for c in 75 60 45; do ab_step "cost$c-$m" moe_gpu_check "$m" PEREGRINE_MOE_GU_SHARED_COST=$c; done
  done
done
echo "== tests"
AB_TEST_TIMEOUT=200 ab_tests moe_gpu_check 'MoeExpertsOp.*:MoeRouterOp.*' | tail -3
AB_TEST_TIMEOUT=200 ab_tests moe_gpu_check 'GpuModelGolden.Tiny*:MlaOp*' PEREGRINE_MOE_GU_SHARED_COST=60 | tail -3
