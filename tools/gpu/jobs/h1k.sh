# Queue job (tools/gpu/queue.sh), session 32: the device tool now lends H100s (80 GB HBM3, ~3.0
# TB/s D2D), where every default was tuned on the H200. Qwen3-30B-A3B batch 1 x 1K (68.3 % of the
# floor in hl32) across the existing A/B knobs, three interleaved rounds, then DeepSeek-V2-Lite
# across the MoE ones. Binaries of hl32 (ab7f6e0).
# Make it: tools/gpu/make_job.sh h1k tools/gpu/jobs/h1k.sh 560 moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "binaries of: $(cat "$JOB/commit" 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
q() { ab_step "$1" moe_gpu_check qwen3-30b-a3b "${@:2}"; }
v() { ab_step "$1" moe_gpu_check deepseek-v2-lite "${@:2}"; }
for r in 1 2 3; do
  q base
  q l2a0 PEREGRINE_MOE_L2_AFTER_PCT=0
  q l2a12 PEREGRINE_MOE_L2_AFTER_PCT=12
  q l2a50 PEREGRINE_MOE_L2_AFTER_PCT=50
  q drows2 PEREGRINE_MOE_DOWN_ROWS=2
  q drows8 PEREGRINE_MOE_DOWN_ROWS=8
  q dwarps8 PEREGRINE_MOE_DOWN_WARPS=8
  q gu4 PEREGRINE_MOE_GU_UNROLL=4
  q wwarps8 PEREGRINE_MOE_WALK_WARPS=8
  q guroutes PEREGRINE_MOE_GU_ROUTES=1
  q nlwarm0 PEREGRINE_MOE_NORM_LOGITS_WARM=0
  q qkvd3 PEREGRINE_GEMV_RING_QKV_DEPTH=3
  q qkvd6 PEREGRINE_GEMV_RING_QKV_DEPTH=6
  q depth4 PEREGRINE_GEMV_RING_DEPTH=4
  q depth8 PEREGRINE_GEMV_RING_DEPTH=8
  q split32 PG_FUSED_MIN_SPLIT_KEYS=32
  q split128 PG_FUSED_MIN_SPLIT_KEYS=128
  q nocluster PG_FUSED_CLUSTER_PLAN=0
  v v-base
  v v-drows8 PEREGRINE_MOE_DOWN_ROWS=8
  v v-gu4 PEREGRINE_MOE_GU_UNROLL=4
  v v-nlwarm0 PEREGRINE_MOE_NORM_LOGITS_WARM=0
done
