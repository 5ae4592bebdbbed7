# Queue job (tools/gpu/queue.sh), session 35. s35c (H100, Qwen3-30B-A3B): with the attention's
# PDL trigger after its preparation (PG_FUSED_PDL_LATE=2) the new token's loads landed in 0.74
# instead of 2.62 us, but the key phase + merge took 10.0 instead of 5.0 us (+69 us a step): the
# o projection's ring fill (128 KB a block on every SM, issued at once) slows whatever attention
# phase it overlaps. PEREGRINE_RING_FILL_INFLIGHT=n paces the fill's first round (at most n of
# its 32 KB slots in flight). Rows for Qwen3 and V2-Lite (both o projections take the ring), the
# probe trace with 1.
# Made at a1e0266:
#   ninja -C build/cuda moe_gpu_check
#   git apply tools/gpu/jobs/s35_prep_probe.patch && ninja -C build/trace moe_gpu_check &&
#     cp build/trace/tests/models/moe_gpu_check /tmp/probe_moe_gpu_check && git apply -R tools/gpu/jobs/s35_prep_probe.patch
#   tools/gpu/make_job.sh s35d tools/gpu/jobs/s35d.sh 200 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     probe_moe_gpu_check=/tmp/probe_moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
main_rows() {
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step fill1-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_RING_FILL_INFLIGHT=1
  ab_step fill2-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_RING_FILL_INFLIGHT=2
  ab_step base-deepseek-v2-lite moe_gpu_check deepseek-v2-lite
  ab_step fill1-deepseek-v2-lite moe_gpu_check deepseek-v2-lite PEREGRINE_RING_FILL_INFLIGHT=1
  ab_step fill2-deepseek-v2-lite moe_gpu_check deepseek-v2-lite PEREGRINE_RING_FILL_INFLIGHT=2
}
main_rows
main_rows
AB_TRACE_PHASES=9 ab_trace t-qwen3-prep-fill1 probe_moe_gpu_check qwen3-30b-a3b PEREGRINE_RING_FILL_INFLIGHT=1
main_rows
