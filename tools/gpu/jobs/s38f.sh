# Queue job (tools/gpu/queue.sh), session 38: why the gate/up kernel's self-routing
# (PEREGRINE_MOE_GU_ROUTES=1: no router kernel, each gate/up block routes its token from the
# NormLogits logits) measured slower (sessions 21-36: +6 us a layer, +247 / +360 us a step on
# Qwen3-30B-A3B) when by the trace's arithmetic it removes ~2.8 us a layer (the router kernel's
# release + post + the ids read). Rows at HEAD (main), two rounds after a warm-up; then block
# traces of Qwen3-30B-A3B 1 x 1K with and without.
# Make it:
#   ninja -C build/cuda moe_gpu_check && ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh s38f tools/gpu/jobs/s38f.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     moe_trace=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ab_step warmup moe_gpu_check qwen3-30b-a3b
for r in 1 2; do
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step self-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_GU_ROUTES=1
  ab_step selfnopre-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_GU_ROUTES=1 PEREGRINE_MOE_DOWN_PRELOAD=0
done
AB_TRACE_LAUNCHES=1 AB_TRACE_PHASES=70 ab_trace base moe_trace qwen3-30b-a3b | command grep -v -E '^ +1 +1024' | command sed -n '1,75p'
AB_TRACE_LAUNCHES=1 AB_TRACE_PHASES=70 ab_trace self moe_trace qwen3-30b-a3b PEREGRINE_MOE_GU_ROUTES=1 | command grep -v -E '^ +1 +1024' | command sed -n '1,75p'
