# Queue job (tools/gpu/queue.sh), session 38 (branch s38/gu-carveout, on s38/nl-late-trigger):
# is the self-routing gate/up kernel's slow rows (s38j: rows 4 and 7, on the ~30 SMs that held
# NormLogits' 32 blocks at its dispatch) the L1 size? An SM keeps its L1 / shared split until it
# drains; the ring kernels before the gate/up kernel ask for the largest shared part (L1 ~28 KB),
# and the gate/up warps re-read x (4 KB) through L1 for every row pair. PEREGRINE_MOE_GU_CARVEOUT
# sets the gate/up kernels' preferred carveout: 100 (largest shared, as the SMs that stay busy)
# without self-routing should slow every row if L1 is the cause; 0 (largest L1) with it.
# Make it on that branch:
#   ninja -C build/cuda moe_gpu_check && ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh s38k tools/gpu/jobs/s38k.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     moe_trace=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
S="PEREGRINE_MOE_GU_ROUTES=1 PEREGRINE_MOE_NL_LATE_TRIGGER=1"
ab_step warmup moe_gpu_check qwen3-30b-a3b
for r in 1 2; do
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step c100-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_GU_CARVEOUT=100
  ab_step c0-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_GU_CARVEOUT=0
  ab_step selflate-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b $S
  ab_step selflatec0-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b $S PEREGRINE_MOE_GU_CARVEOUT=0
  ab_step base-deepseek-v2-lite moe_gpu_check deepseek-v2-lite
  ab_step c100-deepseek-v2-lite moe_gpu_check deepseek-v2-lite PEREGRINE_MOE_GU_CARVEOUT=100
  ab_step c0-deepseek-v2-lite moe_gpu_check deepseek-v2-lite PEREGRINE_MOE_GU_CARVEOUT=0
done
AB_TRACE_PHASES=0 ab_trace c100 moe_trace qwen3-30b-a3b PEREGRINE_MOE_GU_CARVEOUT=100 | command grep -v -E '^ +1 +1024' | command sed -n '1,14p'
AB_TRACE_PHASES=0 ab_trace base moe_trace qwen3-30b-a3b | command grep -v -E '^ +1 +1024' | command sed -n '1,14p'
