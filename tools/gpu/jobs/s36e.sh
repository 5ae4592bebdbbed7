# (Ran binaries of branch s36/router-fold, 7891b0b / 3233f21; reverted on main as measured slower:
# docs/PERF.md "Session 36". The make commands below need that branch checked out.)
# Queue job (tools/gpu/queue.sh), session 36: the folded router after s36d's trace (its router
# kernel's norm took 6.1 us after the wait: the norm weights loaded after x, the logits after the
# stores; the o projection's side weights read before its wait slowed the attention's new-token
# loads 2.8 -> 4.9 us): norm weights before the wait, logits and x together; the o side weights
# after the wait. Tests, traces base / fold, then rows interleaved.
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check gemv_gpu_check && ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh s36e tools/gpu/jobs/s36e.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     gemv_gpu_check=build/cuda/tests/models/gemv_gpu_check moe_trace=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
echo "== tests"
ab_tests gemv_gpu_check 'FusedMatmulOp.*' | tail -3
ab_tests moe_gpu_check 'MoeRouterOp.*:MoeExpertsOp.*' | tail -3
ab_tests moe_gpu_check 'GpuModelGolden.Tiny*' PEREGRINE_MOE_ROUTER_FOLD=1 | tail -3
echo "== traces"
AB_TRACE_PHASES=200 ab_trace fold moe_trace qwen3-30b-a3b PEREGRINE_MOE_ROUTER_FOLD=1 |
  grep -E -A8 'per kernel kind|^-- (router|decode_mma|ring_mma|gemv_ring)'
echo "== rows"
for r in 1 2 3; do
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step fold-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_ROUTER_FOLD=1
done
