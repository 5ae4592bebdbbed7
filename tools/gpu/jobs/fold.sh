# Queue job (tools/gpu/queue.sh) for the router folded through the o projection
# (Record only: the folded router measured slower and was reverted, docs/PERF.md "Session 28";
# its binaries come from commits 6eabba6 / fa45d1e.)
# (PEREGRINE_MOE_FOLD_ROUTER, on by default; session 28): the GPU tests of the new kernel and the
# model paths (the goldens run with the fold on), then batch-1 step rows with the fold off and
# on, interleaved, three rounds, for Qwen3-30B-A3B and DeepSeek-V2-Lite.
# Make it (here, from the repo root):
#   ninja -C build/cuda moe_gpu_check gemv_gpu_check
#   tools/gpu/make_job.sh fold tools/gpu/jobs/fold.sh 560 new_moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     new_gemv_gpu_check=build/cuda/tests/models/gemv_gpu_check
# Device: run(command="QUEUE_BUDGET=580 JOBS=fold tools/gpu/queue.sh >/dev/null 2>&1; tar -xzf
#   $OUT/fold.tgz -C $OUT; cat $OUT/fold/log.txt; python3 tools/gpu/ab_summary.py $OUT/fold/log.txt", carry=[".gpulib", ".gpuq/fold"]).
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "== tests"
ab_tests new_moe_gpu_check 'MoeRouterOp.*:GpuMoeFold.*:GpuModelGolden.Tiny*'
ab_tests new_gemv_gpu_check 'MatmulOp.*:FusedMatmulOp.*:Bf16RingMma.*:GemvRing*'
echo "== step rows, batch 1 x 1K (us a step, floor/t)"
for r in 1 2 3; do
  for m in qwen3-30b-a3b deepseek-v2-lite; do
    ab_step "off-$m" new_moe_gpu_check "$m" PEREGRINE_MOE_FOLD_ROUTER=0
    ab_step "fold-$m" new_moe_gpu_check "$m"
  done
done
