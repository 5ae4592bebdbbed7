# Queue job (tools/gpu/queue.sh), session 36: the normed one-row qkv ring's first-fill pacing
# (PEREGRINE_GEMV_RING_QKV_FILL_INFLIGHT; 2 the default since s36a's -3.8 / -5.1 us against
# unpaced) at 1 and 3 slots, Qwen3-30B-A3B and Llama-3.1-8B 1 x 1K, interleaved.
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check gemv_gpu_check
#   tools/gpu/make_job.sh s36j tools/gpu/jobs/s36j.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     gemv_gpu_check=build/cuda/tests/models/gemv_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
for r in 1 2; do
  for n in 2 1 3; do
    ab_step qkvfill$n-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_GEMV_RING_QKV_FILL_INFLIGHT=$n
    ab_step qkvfill$n-llama-3.1-8b gemv_gpu_check llama-3.1-8b PEREGRINE_GEMV_RING_QKV_FILL_INFLIGHT=$n
  done
done
