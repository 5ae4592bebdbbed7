# (Measured slower; the code is on branch s37/gu-pool: check it out to rebuild. docs/PERF.md "Session 37".)
# Queue job (tools/gpu/queue.sh), session 37: the flat gate/up grid with a pool
# (PEREGRINE_MOE_GU_POOL_PCT, MoeWalkArgs::gu_pool): its last share of items drawn by the warps
# that finish first (s37k: DeepSeek-V2-Lite's gate/up blocks end 25-34 us after their wait, a
# 5.1 us tail). Tests first (the flat-grid bit test with pools up to 100 %, the MoE op tests and
# the tiny goldens with a 50 % pool), then DeepSeek-V2-Lite / Moonlight 1 x 1K at pools 10 / 25
# / 50 %, and Qwen3-30B-A3B's one token on the flat grid with pools (its default grid is per
# slot), three rounds after a warm-up.
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check
#   tools/gpu/make_job.sh s37l tools/gpu/jobs/s37l.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
echo "== tests"
ab_tests moe_gpu_check 'MoeExpertsOp.CudaFlatGateUpChangesNoBit' | tail -2
ab_tests moe_gpu_check 'MoeExpertsOp.*:GpuModelGolden.Tiny*' PEREGRINE_MOE_GU_POOL_PCT=50 PEREGRINE_MOE_GU_FLAT=2 | tail -3
ab_step warmup moe_gpu_check deepseek-v2-lite
for r in 1 2 3; do
  for m in deepseek-v2-lite moonlight-16b-a3b; do
    ab_step "base-$m" moe_gpu_check "$m"
    ab_step "pool10-$m" moe_gpu_check "$m" PEREGRINE_MOE_GU_POOL_PCT=10
    ab_step "pool25-$m" moe_gpu_check "$m" PEREGRINE_MOE_GU_POOL_PCT=25
    ab_step "pool50-$m" moe_gpu_check "$m" PEREGRINE_MOE_GU_POOL_PCT=50
  done
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step flat2pool25-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_GU_FLAT=2 PEREGRINE_MOE_GU_POOL_PCT=25
  ab_step flat2pool50-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_GU_FLAT=2 PEREGRINE_MOE_GU_POOL_PCT=50
done
