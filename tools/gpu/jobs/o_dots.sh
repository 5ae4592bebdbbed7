# Queue job (tools/gpu/queue.sh) for the router's row dots in the o projection
# (Record only: the router-from-o-dots path measured slower and was removed in 4b5b696,
# docs/PERF.md "Session 28"; its binaries come from commits before it.)
# (PEREGRINE_MOE_O_DOTS=1, off by default; session 25): the GPU tests of the new kernels and
# the model paths, then batch-1 step rows — main before the change (5e71c10, "base"), the
# change with the dots on ("dots"; "dots16": the router kernel at 16 lanes a quad, 512 threads)
# and off ("off") — interleaved; and Qwen3 with its attention's cluster plan at 128-key splits.
# Make it (here, from the repo root; both trees built in build/cuda, so ccache serves them):
#   git checkout 5e71c10 && ninja -C build/cuda moe_gpu_check && cp build/cuda/tests/models/moe_gpu_check /tmp/base_moe
#   git checkout main && ninja -C build/cuda moe_gpu_check gemv_gpu_check
#   tools/gpu/make_job.sh o_dots tools/gpu/jobs/o_dots.sh 540 base_moe_gpu_check=/tmp/base_moe \
#     new_moe_gpu_check=build/cuda/tests/models/moe_gpu_check new_gemv_gpu_check=build/cuda/tests/models/gemv_gpu_check
# Device: run(command="QUEUE_BUDGET=570 JOBS=o_dots tools/gpu/queue.sh >/dev/null 2>&1; tar -xzf
#   $OUT/o_dots.tgz -C $OUT; cat $OUT/o_dots/log.txt; python3 tools/gpu/ab_summary.py $OUT/o_dots/log.txt", carry=[".gpulib", ".gpuq/o_dots"]).
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "== tests (branch binaries)"
ab_tests new_gemv_gpu_check 'FusedMatmulOp.*:Bf16RingMma.*'
ab_tests new_moe_gpu_check 'MoeRouterOp.*:MoeExpertsOp.*:GpuMoeDots.*:GpuModelGolden.TinyQwen3Moe:GpuModelGolden.TinyDeepseekV3'
ab_tests new_moe_gpu_check 'MoeRouterOp.Dots*:MoeExpertsOp.*' PEREGRINE_MOE_DOTS_LANES=16
echo "== step rows, batch 1 x 1K (us a step, floor/t)"
for r in 1 2; do
  for m in qwen3-30b-a3b deepseek-v2-lite; do
    ab_step "base-$m" base_moe_gpu_check "$m"
    ab_step "dots-$m" new_moe_gpu_check "$m" PEREGRINE_MOE_O_DOTS=1
    ab_step "dots16-$m" new_moe_gpu_check "$m" PEREGRINE_MOE_O_DOTS=1 PEREGRINE_MOE_DOTS_LANES=16
    ab_step "off-$m" new_moe_gpu_check "$m"
  done
  # Qwen3's cluster plan at 8 splits of 128 keys instead of 16 of 64 (each split repeats the
  # new token's q / k norm and RoPE; docs/design/decode-latency.md): a knob, no code change.
  ab_step "split128-qwen3-30b-a3b" new_moe_gpu_check qwen3-30b-a3b PG_FUSED_MIN_SPLIT_KEYS=128
done
