# Queue job (tools/gpu/queue.sh), session 37: the headline rows at HEAD (7eabfbf: the gate/up
# kernel at 4 loads in flight where bf16's one-token grid goes flat), on whatever card the call
# gets (asked as nvidia-h200: issue 7's goal is the H200's): batch 1 x 1K three rounds after a
# warm-up, batches 8 / 32, Moonlight, Llama-3.1-8B as a control; then every moe_gpu_check test.
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check gemv_gpu_check
#   tools/gpu/make_job.sh s37j tools/gpu/jobs/s37j.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     gemv_gpu_check=build/cuda/tests/models/gemv_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ab_hbm
ab_step warmup moe_gpu_check qwen3-30b-a3b
for r in 1 2 3; do
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step base-deepseek-v2-lite moe_gpu_check deepseek-v2-lite
done
ab_headline_rest
echo "== tests"
AB_TEST_TIMEOUT=300 ab_tests moe_gpu_check '*' | tail -4
