# (Ran in session 37 as s37o, measured slower; the code is on branch s37/deferred-widen. docs/PERF.md "Session 37".)
# Queue job (tools/gpu/queue.sh), session 37:
# branch s37/deferred-widen (78126ea) against main. ptxas keeps a bf16 -> f32 widening next to
# its load, so a value loaded early stalls the warp right there (checked in the SASS, session 37):
#  - the normed GEMVs' RMSNorm weights, loaded "before PdlWait", were widened before it: the
#    warps waited for those loads (HBM, ~1-2 us) before reaching the wait (s37k: DeepSeek-V2-Lite's
#    q + kv_a GEMV's wait returns 2.1 us after the down kernel's end, against ~1 us elsewhere);
#  - the accumulate forms' old output values (gemv_vec / ring GEMV one-row, the fp8/bf16 ring MMA,
#    the MoE down kernels), loaded "now, not after the dot", were widened at once: one L2 round
#    trip before the x staging / weight stream began.
# The branch holds the raw bits and widens at use (common/deferred_load.cuh). Same values, so
# the GPU tests must pass unchanged; rows: Qwen3-30B-A3B, DeepSeek-V2-Lite, Moonlight
# 1 x 1K, two interleaved rounds after a warm-up, then the tests (rows first: the
# session that built it had 244 s of device time left).
# (moe_gpu_check only: two gemv_gpu_check binaries more overran the 64 MiB a call carries. The
# GEMV kernels changed are linked into it and run in every model step and tiny golden; the
# ring GEMV's own tests, GemvRing.* / Bf16RingMma.* / Fp8RingMma* / FusedMatmulOp.* in
# gemv_gpu_check, and Llama-3.1-8B's rows are for the next call.)
# Make it (both trees built in build/cuda, the branch's binaries copied aside first):
#   git checkout s37/deferred-widen && ninja -C build/cuda moe_gpu_check
#   mkdir -p /tmp/nr && cp build/cuda/tests/models/moe_gpu_check /tmp/nr/moe_nr
#   git checkout main && ninja -C build/cuda moe_gpu_check
#   tools/gpu/make_job.sh s37o tools/gpu/jobs/s37o.sh 150 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     moe_nr=/tmp/nr/moe_nr
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ab_step warmup moe_gpu_check qwen3-30b-a3b
for r in 1 2; do
  for m in qwen3-30b-a3b deepseek-v2-lite moonlight-16b-a3b; do
    ab_step "base-$m" moe_gpu_check "$m"
    ab_step "widen-$m" moe_nr "$m"
  done
done
echo "== tests (branch binaries)"
ab_tests moe_nr 'MoeExpertsOp.*:MoeRouterOp.*:GpuModelGolden.Tiny*' | tail -3
