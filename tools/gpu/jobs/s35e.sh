# Queue job (tools/gpu/queue.sh), session 35: the new defaults — the flat gate/up grid at one
# token with bf16 experts (walk_gu_flat 1) and the one-row ring GEMV's paced first fill
# (ring_fill_inflight -1: one slot in flight where the round fills >= 4 slots, Qwen3's o) —
# against each turned off, and the GPU tests they touch (the ring's layout-invariance test with
# the paced layouts, the MoE experts and every tiny model golden).
# Made at 746a315:
#   ninja -C build/cuda moe_gpu_check gemv_gpu_check
#   tools/gpu/make_job.sh s35e tools/gpu/jobs/s35e.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     gemv_gpu_check=build/cuda/tests/models/gemv_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
main_rows() {
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step fill0-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_RING_FILL_INFLIGHT=0
  ab_step base-deepseek-v2-lite moe_gpu_check deepseek-v2-lite
  ab_step flat0-deepseek-v2-lite moe_gpu_check deepseek-v2-lite PEREGRINE_MOE_GU_FLAT=0
}
main_rows
main_rows
echo "== tests"
ab_tests gemv_gpu_check 'Bf16RingMma.*:Fp8RingMma*' | tail -4
ab_tests moe_gpu_check 'MoeExpertsOp.*:GpuModelGolden.Tiny*' | tail -4
main_rows
