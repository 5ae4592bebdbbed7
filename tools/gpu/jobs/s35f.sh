# Queue job (tools/gpu/queue.sh), session 35: the engine's serving graph sets (1K / 2K / 4K keys
# under the 32K capture) with the session's defaults against each turned off, and block traces of
# both models at the new defaults (where the next latency is).
# Make it at commit 746a315 (or later, same kernels):
#   ninja -C build/cuda moe_gpu_check && ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh s35f tools/gpu/jobs/s35f.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     trace_moe_gpu_check=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
for r in 1 2; do
  ab_serve base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_serve fill0-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_RING_FILL_INFLIGHT=0
  ab_serve base-deepseek-v2-lite moe_gpu_check deepseek-v2-lite
  ab_serve flat0-deepseek-v2-lite moe_gpu_check deepseek-v2-lite PEREGRINE_MOE_GU_FLAT=0
done
AB_TRACE_LAUNCHES=1 AB_TRACE_PHASES=40 ab_trace t-v2lite trace_moe_gpu_check deepseek-v2-lite
AB_TRACE_LAUNCHES=1 AB_TRACE_PHASES=40 ab_trace t-qwen3 trace_moe_gpu_check qwen3-30b-a3b
