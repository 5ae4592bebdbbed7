# Queue job (tools/gpu/queue.sh), session 35. s35a's probe (H100): after the fused attention's
# PDL wait, the new token's loads took 2.6 us a block to land and the k row's norm + RoPE (~60
# instructions) 1.1 us (p90 3.0), the q rows 1.1 us: code the SM last ran a layer ago, through
# L2 that the layer's ~75 MB of weights have since streamed over, is a suspect (an L2 prefetch
# of the data lines changed nothing). PG_FUSED_PREP_WARM=1 runs the preparation once before the
# wait as a dry run (one copy of the code, two passes). Rows, the probe trace with and without,
# the attention tests and goldens with it. Also the new default flat gate/up grid (V2-Lite)
# against PEREGRINE_MOE_GU_FLAT=0.
# Made at 0f61d4e:
#   ninja -C build/cuda moe_gpu_check fattn_gpu_check
#   git apply tools/gpu/jobs/s35_prep_probe.patch && ninja -C build/trace moe_gpu_check &&
#     cp build/trace/tests/models/moe_gpu_check /tmp/probe_moe_gpu_check && git apply -R tools/gpu/jobs/s35_prep_probe.patch
#   tools/gpu/make_job.sh s35b tools/gpu/jobs/s35b.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check probe_moe_gpu_check=/tmp/probe_moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
main_rows() {
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step warm-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PG_FUSED_PREP_WARM=1
  ab_step base-deepseek-v2-lite moe_gpu_check deepseek-v2-lite
  ab_step flat0-deepseek-v2-lite moe_gpu_check deepseek-v2-lite PEREGRINE_MOE_GU_FLAT=0
}
main_rows
main_rows
echo "== tests"
ab_tests fattn_gpu_check 'RopeKvWriteAttention.*:GpuModelGolden.Tiny*' PG_FUSED_PREP_WARM=1 | tail -5
ab_tests moe_gpu_check 'MoeExpertsOp.*:GpuModelGolden.Tiny*' PG_FUSED_PREP_WARM=1 | tail -5
AB_TRACE_PHASES=9 ab_trace t-qwen3-prep probe_moe_gpu_check qwen3-30b-a3b
AB_TRACE_PHASES=9 ab_trace t-qwen3-prep-warm probe_moe_gpu_check qwen3-30b-a3b PG_FUSED_PREP_WARM=1
main_rows
