# Queue job (tools/gpu/queue.sh), for session 36's first call: session 35's defaults measured on
# whatever card comes (the issue's goal is the H200's batch-1 share of the floor), and the GPU
# tests of session 35's review commit (fecf8fb: both rings' first-fill pacing as one helper,
# bulk::PaceFirstFill, never run on a GPU). Rows first (essential), then the tests, then batch
# 8 / 32 rows and the dense models, then Qwen3's qkv ring at 5 / 6 slots (session 35's trace:
# its 21 MB stream at ~2.0 TB/s from the blocks' start, the largest streaming shortfall left;
# 4 slots was chosen in session 12, before the o projection's fill was paced), and that fill
# paced (PEREGRINE_GEMV_RING_QKV_FILL_INFLIGHT=2, Qwen3 and Llama).
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check gemv_gpu_check
#   tools/gpu/make_job.sh s36a tools/gpu/jobs/s36a.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
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
ab_tests gemv_gpu_check 'Bf16RingMma.*:Fp8RingMma*:GemvRing.*' | tail -4
ab_tests gemv_gpu_check 'GemvRing.*' PEREGRINE_GEMV_RING_FILL_INFLIGHT=1 | tail -2
ab_tests moe_gpu_check 'MoeExpertsOp.*:GpuModelGolden.Tiny*' | tail -3
main_rows
ab_batches base qwen3-30b-a3b 8,32
ab_batches base deepseek-v2-lite 8,32
ab_batches base moonlight-16b-a3b 1
AB_BIN=gemv_gpu_check ab_batches base llama-3.1-8b 1
AB_BIN=gemv_gpu_check ab_batches gfill0 llama-3.1-8b 1 PEREGRINE_GEMV_RING_FILL_INFLIGHT=0
for r in 1 2; do
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step qkv5-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_GEMV_RING_QKV_DEPTH=5
  ab_step qkv6-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_GEMV_RING_QKV_DEPTH=6
  ab_step qkvfill2-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_GEMV_RING_QKV_FILL_INFLIGHT=2
  ab_step qkvfill2-llama-3.1-8b gemv_gpu_check llama-3.1-8b PEREGRINE_GEMV_RING_QKV_FILL_INFLIGHT=2
  ab_step base-llama-3.1-8b gemv_gpu_check llama-3.1-8b
done
ab_tests gemv_gpu_check 'GemvRing.*' PEREGRINE_GEMV_RING_QKV_FILL_INFLIGHT=1 | tail -2
