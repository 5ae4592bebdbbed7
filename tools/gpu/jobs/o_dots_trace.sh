# Queue job (tools/gpu/queue.sh): block timelines (-DPEREGRINE_BLOCK_TRACE=ON build) of one
# (Record only: the router-from-o-dots path measured slower and was removed in 4b5b696,
# docs/PERF.md "Session 28"; its binaries come from commits before it.)
# Qwen3-30B-A3B 1 x 1K step with the router from the o projection's row dots off / on / on at
# 16 lanes (PEREGRINE_MOE_O_DOTS, PEREGRINE_MOE_DOTS_LANES; session 25), so the next session sees
# where a layer's time moved: per kernel kind the critical-path increment and the phases.
# Make it: cmake --preset cuda -B build/trace -DPEREGRINE_BLOCK_TRACE=ON && ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh o_dots_trace tools/gpu/jobs/o_dots_trace.sh 240 \
#     trace_moe_gpu_check=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
export AB_TRACE_LAUNCHES=1
ab_trace off trace_moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_O_DOTS=0
ab_trace on trace_moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_O_DOTS=1
ab_trace on16 trace_moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_O_DOTS=1 PEREGRINE_MOE_DOTS_LANES=16
