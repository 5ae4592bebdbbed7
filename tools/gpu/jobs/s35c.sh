# Queue job (tools/gpu/queue.sh), session 35. s35b (H100): the preparation's dry run before the
# wait left the new token's loads at 2.7 us (and __ldcg loads made the base 50 us a step slower:
# both reverted). Next suspect: the o projection's ring fill (ring_mma, 128 KB a block, launched
# by the attention's trigger at its start) is in flight on every SM while the attention's
# post-wait loads go out. PG_FUSED_PDL_LATE=2 triggers after the preparation instead (1: after
# the key loop). Rows, the probe trace with 2, the attention tests with 2.
# Made at 387a669:
#   ninja -C build/cuda moe_gpu_check fattn_gpu_check
#   git apply tools/gpu/jobs/s35_prep_probe.patch && ninja -C build/trace moe_gpu_check &&
#     cp build/trace/tests/models/moe_gpu_check /tmp/probe_moe_gpu_check && git apply -R tools/gpu/jobs/s35_prep_probe.patch
#   tools/gpu/make_job.sh s35c tools/gpu/jobs/s35c.sh 240 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check probe_moe_gpu_check=/tmp/probe_moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
main_rows() {
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step late2-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PG_FUSED_PDL_LATE=2
  ab_step late1-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PG_FUSED_PDL_LATE=1
}
main_rows
main_rows
echo "== tests"
ab_tests fattn_gpu_check 'RopeKvWriteAttention.*:GpuModelGolden.Tiny*' PG_FUSED_PDL_LATE=2 | tail -4
AB_TRACE_PHASES=9 ab_trace t-qwen3-prep probe_moe_gpu_check qwen3-30b-a3b
AB_TRACE_PHASES=9 ab_trace t-qwen3-prep-late2 probe_moe_gpu_check qwen3-30b-a3b PG_FUSED_PDL_LATE=2
main_rows
ab_step base-deepseek-v2-lite moe_gpu_check deepseek-v2-lite
ab_step base-deepseek-v2-lite moe_gpu_check deepseek-v2-lite
