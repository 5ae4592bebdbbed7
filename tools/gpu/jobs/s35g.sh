# Queue job (tools/gpu/queue.sh), session 35: the gate/up kernel's item prefetch
# (PEREGRINE_MOE_GU_PF=1: each warp asks L2 for all four rows of its (slot, pair) item before its
# loads). Little's law: Qwen3's gate/up streams 50 MB at 2.6 TB/s on the H100 with 24 warps x 1
# KB in flight an SM (3.2 MB in all); the H200's 4.8 TB/s needs more bytes in flight still.
# Made at 79f4aad (the knob reverted after it: +125 us a step):
#   ninja -C build/cuda moe_gpu_check
#   tools/gpu/make_job.sh s35g tools/gpu/jobs/s35g.sh 200 moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
main_rows() {
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step pf-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_GU_PF=1
  ab_step base-deepseek-v2-lite moe_gpu_check deepseek-v2-lite
  ab_step pf-deepseek-v2-lite moe_gpu_check deepseek-v2-lite PEREGRINE_MOE_GU_PF=1
}
main_rows
main_rows
echo "== tests"
ab_tests moe_gpu_check 'MoeExpertsOp.*:GpuModelGolden.Tiny*' PEREGRINE_MOE_GU_PF=1 | tail -3
main_rows
ab_batches base qwen3-30b-a3b 4,8
ab_batches pf qwen3-30b-a3b 4,8 PEREGRINE_MOE_GU_PF=1
