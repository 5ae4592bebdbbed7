# Queue job (tools/gpu/queue.sh), session 37: a block trace of DeepSeek-V2-Lite 1 x 1K at HEAD
# (the flat gate/up at 4 loads in flight), with two middle layers' launches and the phases.
# Make it at HEAD:
#   ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh s37k tools/gpu/jobs/s37k.sh 200 moe_trace=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
AB_TRACE_LAUNCHES=1 AB_TRACE_PHASES=120 ab_trace base moe_trace deepseek-v2-lite | command grep -v -E '^ +1 +1024' | head -150
