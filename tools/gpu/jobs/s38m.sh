# Queue job (tools/gpu/queue.sh), session 38: the headline at HEAD with the gate/up kernels asking
# for the largest L1 by default (moe_walk.cu LaunchGateUp, PEREGRINE_MOE_GU_CARVEOUT=0), against
# the driver's choice (-1, the old behaviour) in the same binary, three rounds after a warm-up;
# batches 8 / 32, Moonlight, Llama-3.1-8B (control); then every moe_gpu_check test.
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check gemv_gpu_check
#   tools/gpu/make_job.sh s38m tools/gpu/jobs/s38m.sh 420 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     gemv_gpu_check=build/cuda/tests/models/gemv_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ab_hbm
ab_step warmup moe_gpu_check qwen3-30b-a3b
for r in 1 2 3; do
  for m in qwen3-30b-a3b deepseek-v2-lite; do
    ab_step "base-$m" moe_gpu_check "$m"
    ab_step "driver-$m" moe_gpu_check "$m" PEREGRINE_MOE_GU_CARVEOUT=-1
  done
done
ab_headline_rest
echo "== tests"
AB_TEST_TIMEOUT=300 ab_tests moe_gpu_check '*' | tail -4
