# Queue job (tools/gpu/queue.sh), session 28, second round of the folded router
# (Record only: the folded router measured slower and was reverted, docs/PERF.md "Session 28";
# its binaries come from commits 6eabba6 / fa45d1e.)
# (PEREGRINE_MOE_FOLD_ROUTER): its last block's post-wait work in one round trip of loads, the
# norm weights in shared memory and the experts chosen on z before the wait; the grid's
# trigger at its start or (PEREGRINE_MOE_FOLD_TRIGGER=1) after that block's wait. Tests, then
# batch-1 step rows off / fold / fold-late interleaved (three rounds, Qwen3-30B-A3B and
# DeepSeek-V2-Lite), then block traces of a Qwen3 step with each.
# Make it: ninja -C build/cuda moe_gpu_check gemv_gpu_check && ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh fold2 tools/gpu/jobs/fold2.sh 560 new_moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     trace_moe_gpu_check=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "== tests"
ab_tests new_moe_gpu_check 'MoeRouterOp.*:GpuMoeFold.*:GpuMoeDots.*:GpuModelGolden.Tiny*'
ab_tests new_moe_gpu_check 'MoeRouterOp.Fold*:GpuMoeFold.*:GpuModelGolden.TinyQwen3Moe:GpuModelGolden.TinyDeepseekV3' PEREGRINE_MOE_FOLD_TRIGGER=1
echo "== step rows, batch 1 x 1K (us a step, floor/t)"
for r in 1 2 3; do
  for m in qwen3-30b-a3b deepseek-v2-lite; do
    ab_step "off-$m" new_moe_gpu_check "$m" PEREGRINE_MOE_FOLD_ROUTER=0
    ab_step "fold-$m" new_moe_gpu_check "$m"
    ab_step "late-$m" new_moe_gpu_check "$m" PEREGRINE_MOE_FOLD_TRIGGER=1
  done
done
ab_trace fold trace_moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_FOLD_TRIGGER=0
ab_trace late trace_moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_FOLD_TRIGGER=1
