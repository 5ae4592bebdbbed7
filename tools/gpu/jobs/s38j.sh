# Queue job (tools/gpu/queue.sh), session 38 (branch s38/gu-slot-reverse, on s38/nl-late-trigger):
# is the self-routing gate/up kernel's slow slot 7 (s38f, s38g: 20.6-21.7 us a block against
# ~16 for slot 0) the slot (the route's rank) or the grid row (the blocks dispatched last)?
# PEREGRINE_MOE_GU_SLOT_REVERSE=1 deals the per-slot grid's rows to the slots in reverse order.
# Rows two rounds after a warm-up, then traces of self-routing + late trigger with and without.
# Make it on that branch:
#   ninja -C build/cuda moe_gpu_check && ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh s38j tools/gpu/jobs/s38j.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     moe_trace=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
S="PEREGRINE_MOE_GU_ROUTES=1 PEREGRINE_MOE_NL_LATE_TRIGGER=1"
ab_step warmup moe_gpu_check qwen3-30b-a3b
for r in 1 2; do
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step rev-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_GU_SLOT_REVERSE=1
  ab_step selflate-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b $S
  ab_step selflaterev-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b $S PEREGRINE_MOE_GU_SLOT_REVERSE=1
done
AB_TRACE_PHASES=0 ab_trace selflate moe_trace qwen3-30b-a3b $S | command grep -v -E '^ +1 +1024' | command sed -n '1,14p'
AB_TRACE_PHASES=0 ab_trace selflaterev moe_trace qwen3-30b-a3b $S PEREGRINE_MOE_GU_SLOT_REVERSE=1 | command grep -v -E '^ +1 +1024' | command sed -n '1,14p'
AB_TRACE_PHASES=0 ab_trace rev moe_trace qwen3-30b-a3b PEREGRINE_MOE_GU_SLOT_REVERSE=1 | command grep -v -E '^ +1 +1024' | command sed -n '1,14p'
