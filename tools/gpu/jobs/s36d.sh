# (Ran binaries of branch s36/router-fold, 7891b0b / 3233f21; reverted on main as measured slower:
# docs/PERF.md "Session 36". The make commands below need that branch checked out.)
# Queue job (tools/gpu/queue.sh), session 36: why the folded router (s36b: Qwen3-30B-A3B 1 x 1K
# 2879.6 -> 3368.4 us a step with PEREGRINE_MOE_ROUTER_FOLD=1, both side-dot kernels taken)
# is slower: block traces of one step, base and fold (trace build), per kernel kind; and the
# side dots' op test with the device mirror fixed.
# Make it at HEAD:
#   ninja -C build/cuda gemv_gpu_check && ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh s36d tools/gpu/jobs/s36d.sh 300 gemv_gpu_check=build/cuda/tests/models/gemv_gpu_check \
#     moe_trace=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
echo "== tests"
ab_tests gemv_gpu_check 'FusedMatmulOp.*' | tail -6
echo "== traces"
AB_TRACE_LAUNCHES=1 ab_trace base moe_trace qwen3-30b-a3b
AB_TRACE_LAUNCHES=1 ab_trace fold moe_trace qwen3-30b-a3b PEREGRINE_MOE_ROUTER_FOLD=1
