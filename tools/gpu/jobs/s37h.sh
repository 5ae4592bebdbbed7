# (Measured slower; the code is on branch s37/route-flag: check it out to rebuild. docs/PERF.md "Session 37".)
# Queue job (tools/gpu/queue.sh), session 37: block traces of s37g's route flag (second form)
# against the default, Qwen3-30B-A3B 1 x 1K, with two middle layers' launches.
# Make it at HEAD:
#   ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh s37h tools/gpu/jobs/s37h.sh 200 moe_trace=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
AB_TRACE_LAUNCHES=1 AB_TRACE_PHASES=80 ab_trace base moe_trace qwen3-30b-a3b | command grep -v -E '^ +1 +1024' | head -75
AB_TRACE_LAUNCHES=1 AB_TRACE_PHASES=80 ab_trace flag moe_trace qwen3-30b-a3b PEREGRINE_MOE_ROUTE_FLAG=1 | command grep -v -E '^ +1 +1024' | head -75
