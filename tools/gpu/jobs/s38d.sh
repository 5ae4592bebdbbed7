# Queue job (tools/gpu/queue.sh), session 38: shared slots' gate/up items in the routing grid
# (PEREGRINE_MOE_GU_SIDE = MoeTuning::walk_gu_side; moe_walk.cu RouteSharedKernel): at one token
# the router kernel's one block becomes block 0 of a grid whose other blocks compute the first
# 1 or 2 shared slots' gate/up items (rows L2-prefetched before PdlWait), so ~11.5 MB (one slot
# of DeepSeek-V2-Lite's shared expert) stream while the routing runs, where the HBM idles
# (NormLogits + router + the gate/up kernel's ramp, ~9 us a layer); the flat gate/up kernel skips
# those slots. Rows: main's binary (moe_main, 74431ee) against this one at side 0 / 1 / 2,
# DeepSeek-V2-Lite, Moonlight (2 shared slots each), three rounds after a warm-up; the
# DeepSeek-V3 shape (5 layers, fp8, 1 shared slot) at 0 / 1; Qwen3 (no shared expert: the
# code's cost only). Then the tests with the side path forced.
# (Ran in session 38, measured slower; the code is on branch s38/gu-side.)
# Make it on that branch (moe_main: main's binary, packed in .gpuq/s38h):
#   ninja -C build/cuda moe_gpu_check
#   tools/gpu/make_job.sh s38d tools/gpu/jobs/s38d.sh 480 moe_gpu_check=build/cuda/tests/models/moe_gpu_check
#   cp .gpuq/s38h/bin/moe_gpu_check.xz .gpuq/s38d/bin/moe_main.xz
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ab_step warmup moe_gpu_check deepseek-v2-lite
for r in 1 2 3; do
  for m in deepseek-v2-lite moonlight-16b-a3b; do
    ab_step "main-$m" moe_main "$m"
    ab_step "base-$m" moe_gpu_check "$m"
    ab_step "side1-$m" moe_gpu_check "$m" PEREGRINE_MOE_GU_SIDE=1
    ab_step "side2-$m" moe_gpu_check "$m" PEREGRINE_MOE_GU_SIDE=2
  done
done
for r in 1 2; do
  ab_step main-qwen3-30b-a3b moe_main qwen3-30b-a3b
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  AB_BIN=moe_main ab_batches main dsv3_5l 1
  ab_batches base dsv3_5l 1
  ab_batches side1 dsv3_5l 1 PEREGRINE_MOE_GU_SIDE=1
done
echo "== tests"
AB_TEST_TIMEOUT=120 ab_tests moe_gpu_check 'MoeExpertsOp.*:MoeRouterOp.*' | tail -3
for s in 1 2; do
  AB_TEST_TIMEOUT=200 ab_tests moe_gpu_check 'GpuModelGolden.Tiny*:MoeExpertsOp.*:MlaOp*' PEREGRINE_MOE_GU_SIDE=$s | tail -3
done
