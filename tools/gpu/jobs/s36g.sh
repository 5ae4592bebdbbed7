# (Ran the router fold branch's trace build; docs/PERF.md "Session 36".)
# Queue job (tools/gpu/queue.sh), session 36: the folded router's whole-pipeline slowdown
# (s36e: gate/up +4.3 us a layer with a 6-8 us tail of late blocks, qkv +1.1, o +1.65, the
# attention's preparation +1.7): block traces of base and fold from the router fold branch's
# trace build, the CSVs kept for block-level analysis (start / wait / end of every block).
# Make it (branch s36/router-fold checked out, then main again):
#   ninja -C build/trace moe_gpu_check && cp build/trace/tests/models/moe_gpu_check /tmp/moe_trace_fold
#   tools/gpu/make_job.sh s36g tools/gpu/jobs/s36g.sh 300 moe_trace=/tmp/moe_trace_fold
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ab_trace base moe_trace qwen3-30b-a3b | head -14
ab_trace fold moe_trace qwen3-30b-a3b PEREGRINE_MOE_ROUTER_FOLD=1 | head -14
