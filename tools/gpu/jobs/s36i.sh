# (Ran a working-tree A/B reverted after it: the one-row o kernel's late PDL trigger, no gain;
# docs/PERF.md "Session 36".)
# Queue job (tools/gpu/queue.sh), session 36: the one-row o projection's PDL trigger after its
# consumers' wait (PEREGRINE_RING_LATE_TRIGGER=1), so the next kernel (NormLogits, 32 blocks
# loading the router's rows and running its warm pass before their wait) launches once the
# attention is done rather than beside it (s36h: the folded router's late trigger -48 us).
# Qwen3-30B-A3B and DeepSeek-V2-Lite 1 x 1K, three rounds, and Llama-3.1-8B (its o projection
# is the ring GEMV's, not this kernel: a control).
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check gemv_gpu_check
#   tools/gpu/make_job.sh s36i tools/gpu/jobs/s36i.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     gemv_gpu_check=build/cuda/tests/models/gemv_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
for r in 1 2 3; do
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step late-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_RING_LATE_TRIGGER=1
  ab_step base-deepseek-v2-lite moe_gpu_check deepseek-v2-lite
  ab_step late-deepseek-v2-lite moe_gpu_check deepseek-v2-lite PEREGRINE_RING_LATE_TRIGGER=1
done
echo "== tests"
ab_tests gemv_gpu_check 'Bf16RingMma.*:FusedMatmulOp.*' PEREGRINE_RING_LATE_TRIGGER=1 | tail -2
ab_tests moe_gpu_check 'GpuModelGolden.Tiny*' PEREGRINE_RING_LATE_TRIGGER=1 | tail -2
