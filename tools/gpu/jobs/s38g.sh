# Queue job (tools/gpu/queue.sh), session 38: s38f's trace of the gate/up kernel's self-routing
# (PEREGRINE_MOE_GU_ROUTES=1) on Qwen3-30B-A3B showed the per-slot grid's later slots streaming
# far slower (slot 7: 21.7 us a block against 16.2 for slot 0; without self-routing 18.6 / 17.3):
# launched at NormLogits' trigger, its blocks are dispatched while the o projection's blocks
# still leave, the later ones ~2 us after the rest. Here: NormLogits triggering after its stores
# (PEREGRINE_MOE_NL_LATE_TRIGGER=1, new) so the gate/up blocks start together; 4 warps a block
# (more, shorter blocks). Two rounds after a warm-up, then a trace of self + late trigger.
# (Ran in session 38; PEREGRINE_MOE_NL_LATE_TRIGGER is on branch s38/nl-late-trigger.)
# Make it on that branch:
#   ninja -C build/cuda moe_gpu_check && ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh s38g tools/gpu/jobs/s38g.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     moe_trace=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ab_step warmup moe_gpu_check qwen3-30b-a3b
for r in 1 2; do
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step late-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_NL_LATE_TRIGGER=1
  ab_step self-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_GU_ROUTES=1
  ab_step selflate-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_GU_ROUTES=1 PEREGRINE_MOE_NL_LATE_TRIGGER=1
  ab_step selfw4-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_GU_ROUTES=1 PEREGRINE_MOE_WALK_WARPS=4
  ab_step selflatew4-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_GU_ROUTES=1 PEREGRINE_MOE_NL_LATE_TRIGGER=1 PEREGRINE_MOE_WALK_WARPS=4
done
AB_TRACE_LAUNCHES=1 AB_TRACE_PHASES=0 ab_trace selflate moe_trace qwen3-30b-a3b PEREGRINE_MOE_GU_ROUTES=1 PEREGRINE_MOE_NL_LATE_TRIGGER=1 | command grep -v -E '^ +1 +1024' | command sed -n '1,40p'
