# Queue job (tools/gpu/queue.sh), session 34: the gate/up kernel's flat grid (PEREGRINE_MOE_GU_FLAT,
# moe_walk.cu GateUpFlatKernel: at most one wave of blocks, the (slot, pair) items dealt evenly)
# against the one-block-per-slot grid (0, the default when built). s34a's trace showed
# DeepSeek-V2-Lite's gate/up kernel (704 blocks, 8 slots x 88) in two waves: 39.1 us a layer
# for 92 MB (2.4 TB/s) against Qwen3's one wave at 2.6 TB/s. Rows first (device time is short),
# then the tests (bits: MoeExpertsOp.CudaFlatGateUpChangesNoBit; goldens with the flat form
# forced), then a trace of V2-Lite with it. Also V2-Lite's q + kv_a projection (3648 rows) on the
# ring GEMV (PEREGRINE_GEMV_RING_NORM_MIN_M=2048; its release after the down kernel took 2.8 us in s34a),
# and the flat grid capped at 2 blocks an SM (PEREGRINE_MOE_GU_FLAT_SM=2: room for the down kernel's
# preloading blocks beside it; Qwen3's down waits 2.0 us after gate/up's end in s34a, V2-Lite's 1.0).
# Not run in session 34 (no device machine came after s34a). Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check
#   git apply tools/gpu/jobs/s34b_prep_probe.patch && ninja -C build/trace moe_gpu_check &&
#     cp build/trace/tests/models/moe_gpu_check /tmp/probe_moe_gpu_check &&
#     git apply -R tools/gpu/jobs/s34b_prep_probe.patch && ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh s34b tools/gpu/jobs/s34b.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     trace_moe_gpu_check=build/trace/tests/models/moe_gpu_check probe_moe_gpu_check=/tmp/probe_moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
main_rows() {  # one round of the main settings
  ab_step base-deepseek-v2-lite moe_gpu_check deepseek-v2-lite
  ab_step flat1-deepseek-v2-lite moe_gpu_check deepseek-v2-lite PEREGRINE_MOE_GU_FLAT=1
  ab_step flat2sm2-deepseek-v2-lite moe_gpu_check deepseek-v2-lite PEREGRINE_MOE_GU_FLAT=2 PEREGRINE_MOE_GU_FLAT_SM=2
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step flat2sm2-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_GU_FLAT=2 PEREGRINE_MOE_GU_FLAT_SM=2
}
main_rows
main_rows
echo "== tests"
ab_tests moe_gpu_check 'MoeExpertsOp.CudaFlatGateUp*:MoeExpertsOp.*:GpuModelGolden.Tiny*' | tail -8
ab_tests moe_gpu_check 'MoeExpertsOp.*:GpuModelGolden.Tiny*' PEREGRINE_MOE_GU_FLAT=2 | tail -4
# The attention's new-token preparation probed (a trace build with s34b_prep_probe.patch: PrepareNewTokenFast
# marks m1 after the k row's loads and norm + RoPE, m2 after the cache stores, m3 after its q rows,
# m0 after the closing barrier; the exchange form's own marks off):
AB_TRACE_PHASES=8 ab_trace t-qwen3-prep probe_moe_gpu_check qwen3-30b-a3b
main_rows
for r in 1 2; do
  ab_step ring-deepseek-v2-lite moe_gpu_check deepseek-v2-lite PEREGRINE_GEMV_RING_NORM_MIN_M=2048
  ab_step flat2-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_GU_FLAT=2
done
for r in 1 2; do
  ab_batches base qwen3-30b-a3b 2,4
  ab_batches flat1 qwen3-30b-a3b 2,4 PEREGRINE_MOE_GU_FLAT=1
  ab_batches base dsv3_5l 1,4
  ab_batches flat1 dsv3_5l 1,4 PEREGRINE_MOE_GU_FLAT=1
  ab_batches base moonlight-16b-a3b 1
  ab_batches flat1 moonlight-16b-a3b 1 PEREGRINE_MOE_GU_FLAT=1
done
AB_TRACE_LAUNCHES=1 AB_TRACE_PHASES=12 ab_trace t-v2lite-flat1 trace_moe_gpu_check deepseek-v2-lite PEREGRINE_MOE_GU_FLAT=1
