# Queue job (tools/gpu/queue.sh), session 35: the paced first fill for the dense models' o
# projection on the ring GEMV (gemv_ring.cu; PEREGRINE_GEMV_RING_FILL_INFLIGHT=n: one-row
# accumulating launches of k <= 8192). s35d showed the o projection's fill, issued at once beside
# the decode attention, delaying the attention's loads (Qwen3-30B-A3B's ring_mma o: paced, -58 us
# a step); Llama-3.1-8B's o (242 KB a block) runs on gemv_ring, 160-192 KB in flight at once.
# Made at the commit that adds this job:
#   ninja -C build/cuda gemv_gpu_check
#   tools/gpu/make_job.sh s35h tools/gpu/jobs/s35h.sh 200 gemv_gpu_check=build/cuda/tests/models/gemv_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
main_rows() {
  ab_step base-llama-3.1-8b gemv_gpu_check llama-3.1-8b
  ab_step gfill1-llama-3.1-8b gemv_gpu_check llama-3.1-8b PEREGRINE_GEMV_RING_FILL_INFLIGHT=1
  ab_step gfill2-llama-3.1-8b gemv_gpu_check llama-3.1-8b PEREGRINE_GEMV_RING_FILL_INFLIGHT=2
  ab_step base-qwen3-8b gemv_gpu_check qwen3-8b
  ab_step gfill1-qwen3-8b gemv_gpu_check qwen3-8b PEREGRINE_GEMV_RING_FILL_INFLIGHT=1
  ab_step gfill2-qwen3-8b gemv_gpu_check qwen3-8b PEREGRINE_GEMV_RING_FILL_INFLIGHT=2
}
main_rows
main_rows
echo "== tests"
ab_tests gemv_gpu_check 'GemvRing.*' PEREGRINE_GEMV_RING_FILL_INFLIGHT=1 | tail -3
ab_tests gemv_gpu_check 'GemvRing.*' PEREGRINE_GEMV_RING_FILL_INFLIGHT=2 | tail -3
main_rows
