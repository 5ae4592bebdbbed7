# Queue job (tools/gpu/queue.sh), session 37: DeepSeek-V2-Lite's and Moonlight's q + kv_a
# (3648 / 3648 rows x 2048) on the normed one-row ring GEMV (PEREGRINE_GEMV_RING_NORM_MIN_M=2048)
# again: session 35 measured it +48.7 on V2-Lite before the ring's first fill was paced (session
# 36's default, 2 slots in flight); the s37k trace has the q + kv_a GEMV's blocks starting only
# ~0.4 us before the down kernel's end and its wait returning 2.1 us after it. Fill at 1 / 2 / 3
# slots, three rounds after a warm-up; then the ring's tests at NORM_MIN_M=2048.
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check gemv_gpu_check
#   tools/gpu/make_job.sh s37n tools/gpu/jobs/s37n.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     gemv_gpu_check=build/cuda/tests/models/gemv_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ab_step warmup moe_gpu_check deepseek-v2-lite
for r in 1 2 3; do
  for m in deepseek-v2-lite moonlight-16b-a3b; do
    ab_step "base-$m" moe_gpu_check "$m"
    ab_step "ring-$m" moe_gpu_check "$m" PEREGRINE_GEMV_RING_NORM_MIN_M=2048
    ab_step "ring1-$m" moe_gpu_check "$m" PEREGRINE_GEMV_RING_NORM_MIN_M=2048 PEREGRINE_GEMV_RING_QKV_FILL_INFLIGHT=1
    ab_step "ring3-$m" moe_gpu_check "$m" PEREGRINE_GEMV_RING_NORM_MIN_M=2048 PEREGRINE_GEMV_RING_QKV_FILL_INFLIGHT=3
  done
done
echo "== tests"
ab_tests gemv_gpu_check 'GemvRing.*' PEREGRINE_GEMV_RING_NORM_MIN_M=2048 | tail -2
