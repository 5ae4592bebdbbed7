# Queue job (tools/gpu/queue.sh), session 38: block traces of DeepSeek-V2-Lite 1 x 1K with the
# shared slot's gate/up in the routing grid (PEREGRINE_MOE_GU_SIDE=1, s38d: +92 us a step) and
# without, to see where the time goes (the router block, the gate/up kernel's start and tail).
# (Ran in session 38; the code is on branch s38/gu-side.)
# Make it on that branch:
#   ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh s38e tools/gpu/jobs/s38e.sh 200 moe_trace=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
AB_TRACE_LAUNCHES=1 AB_TRACE_PHASES=60 ab_trace base moe_trace deepseek-v2-lite | command grep -v -E '^ +1 +1024' | command sed -n '1,80p'
AB_TRACE_LAUNCHES=1 AB_TRACE_PHASES=60 ab_trace side1 moe_trace deepseek-v2-lite PEREGRINE_MOE_GU_SIDE=1 | command grep -v -E '^ +1 +1024' | command sed -n '1,80p'
