# Queue job (tools/gpu/queue.sh), session 38 (branch s38/gu-carveout): s38k found the gate/up
# kernels asking for the largest L1 (PEREGRINE_MOE_GU_CARVEOUT=0) faster on Qwen3-30B-A3B
# (-20.7 us a step, two rounds) and the largest shared part slower (+58 / +83): their warps
# re-read x through L1. Here three rounds after a warm-up, the gate/up kernels at 0, the down
# kernel at 0 (PEREGRINE_MOE_DOWN_CARVEOUT: it reads the token's act rows through L1), both;
# Qwen3, DeepSeek-V2-Lite, Moonlight; then batches 8 / 32 and DeepSeek-V3's fp8 shape with both.
# (The gate/up kernels at carveout 0 became main's default in 049e29b; the down knob is on the
# branch only.)
# Make it on that branch:
#   ninja -C build/cuda moe_gpu_check
#   tools/gpu/make_job.sh s38l tools/gpu/jobs/s38l.sh 420 moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ab_step warmup moe_gpu_check qwen3-30b-a3b
for r in 1 2 3; do
  for m in qwen3-30b-a3b deepseek-v2-lite moonlight-16b-a3b; do
    ab_step "base-$m" moe_gpu_check "$m"
    ab_step "gu0-$m" moe_gpu_check "$m" PEREGRINE_MOE_GU_CARVEOUT=0
    ab_step "dn0-$m" moe_gpu_check "$m" PEREGRINE_MOE_DOWN_CARVEOUT=0
    ab_step "both0-$m" moe_gpu_check "$m" PEREGRINE_MOE_GU_CARVEOUT=0 PEREGRINE_MOE_DOWN_CARVEOUT=0
  done
done
for m in qwen3-30b-a3b deepseek-v2-lite; do
  ab_batches base "$m" 8,32
  ab_batches gu0 "$m" 8,32 PEREGRINE_MOE_GU_CARVEOUT=0
  ab_batches both0 "$m" 8,32 PEREGRINE_MOE_GU_CARVEOUT=0 PEREGRINE_MOE_DOWN_CARVEOUT=0
done
for r in 1 2; do
  ab_batches base dsv3_5l 1
  ab_batches gu0 dsv3_5l 1 PEREGRINE_MOE_GU_CARVEOUT=0
  ab_batches both0 dsv3_5l 1 PEREGRINE_MOE_GU_CARVEOUT=0 PEREGRINE_MOE_DOWN_CARVEOUT=0
done
