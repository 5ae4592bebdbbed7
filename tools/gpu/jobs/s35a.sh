# Queue job (tools/gpu/queue.sh), session 35. (1) The flat gate/up grid's deal: each block a
# contiguous item range (now the default of PEREGRINE_MOE_GU_FLAT=1/2) against session 34's
# strided deal (PEREGRINE_MOE_GU_FLAT_STRIDED=1; s34b on the H100: V2-Lite -28.8 us, Moonlight
# -47, but Qwen3 at 2/4 tokens +125/+178 and DeepSeek-V3 fp8 at 4 tokens +119). (2) The fused
# attention's new-token L2 prefetch before its PDL wait (PG_FUSED_NEW_TOKEN_PREFETCH=1): s34b's
# probe put 3.0 us a block between the wait and the new token's loads landing + k norm/RoPE on
# Qwen3 (the address translations of the activation buffers are a suspect). The probe build
# (s35_prep_probe.patch: m3 = every load landed, m1 = k norm + RoPE done, m2 = cache stores,
# m0 = the preparation's closing barrier) traces both.
# Made at ee6516f:
#   ninja -C build/cuda moe_gpu_check fattn_gpu_check
#   git apply tools/gpu/jobs/s35_prep_probe.patch && ninja -C build/trace moe_gpu_check &&
#     cp build/trace/tests/models/moe_gpu_check /tmp/probe_moe_gpu_check && git apply -R tools/gpu/jobs/s35_prep_probe.patch
#   tools/gpu/make_job.sh s35a tools/gpu/jobs/s35a.sh 330 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check probe_moe_gpu_check=/tmp/probe_moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
main_rows() {
  ab_step base-deepseek-v2-lite moe_gpu_check deepseek-v2-lite
  ab_step flat1-deepseek-v2-lite moe_gpu_check deepseek-v2-lite PEREGRINE_MOE_GU_FLAT=1
  ab_step flat1s-deepseek-v2-lite moe_gpu_check deepseek-v2-lite PEREGRINE_MOE_GU_FLAT=1 PEREGRINE_MOE_GU_FLAT_STRIDED=1
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step pf-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PG_FUSED_NEW_TOKEN_PREFETCH=1
}
main_rows
main_rows
echo "== tests"
ab_tests moe_gpu_check 'MoeExpertsOp.CudaFlatGateUp*:GpuModelGolden.Tiny*' PG_FUSED_NEW_TOKEN_PREFETCH=1 | tail -6
ab_tests fattn_gpu_check 'RopeKvWriteAttention.*:GpuModelGolden.*' PG_FUSED_NEW_TOKEN_PREFETCH=1 | tail -6
AB_TRACE_PHASES=9 ab_trace t-qwen3-prep probe_moe_gpu_check qwen3-30b-a3b
AB_TRACE_PHASES=9 ab_trace t-qwen3-prep-pf probe_moe_gpu_check qwen3-30b-a3b PG_FUSED_NEW_TOKEN_PREFETCH=1
main_rows
for r in 1 2; do
  ab_batches base qwen3-30b-a3b 2,4
  ab_batches flat1 qwen3-30b-a3b 2,4 PEREGRINE_MOE_GU_FLAT=1
  ab_batches flat1s qwen3-30b-a3b 2,4 PEREGRINE_MOE_GU_FLAT=1 PEREGRINE_MOE_GU_FLAT_STRIDED=1
  ab_batches base dsv3_5l 1,4
  ab_batches flat1 dsv3_5l 1,4 PEREGRINE_MOE_GU_FLAT=1
  ab_batches base moonlight-16b-a3b 1
  ab_batches flat1 moonlight-16b-a3b 1 PEREGRINE_MOE_GU_FLAT=1
done
