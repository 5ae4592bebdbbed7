# Queue job (tools/gpu/queue.sh), session 37: the second one-knob sweep around the defaults of
# 7eabfbf (the attention's, the MLA decode's, the router's and the ring GEMV's knobs s37b left
# out), Qwen3-30B-A3B and DeepSeek-V2-Lite 1 x 1K, a warm-up step, two interleaved rounds.
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check
#   tools/gpu/make_job.sh s37e tools/gpu/jobs/s37e.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
settings=(
  "twotile0 PG_FUSED_TWO_TILE=0" "prepregs0 PG_FUSED_PREP_REGS=0" "prepregs1 PG_FUSED_PREP_REGS=1"
  "cluster0 PG_FUSED_CLUSTER=0" "small0 PG_FUSED_SMALL=0" "fusedlate1 PG_FUSED_PDL_LATE=1"
  "xw2 PG_FUSED_XW=2" "xw3 PG_FUSED_XW=3" "smallcarve0 PG_FUSED_SMALL_CARVEOUT=0"
  "mlatiles2 PEREGRINE_MLA_MIN_TILES=2" "mlaslim1 PEREGRINE_MLA_SLIM=1" "mlacarve1 PEREGRINE_MLA_CARVEOUT=1"
  "nlwarm0 PEREGRINE_MOE_NORM_LOGITS_WARM=0" "fusedshared0 PEREGRINE_MOE_FUSED_SHARED=0"
  "sleep200 PEREGRINE_GEMV_RING_PRODUCER_SLEEP_NS=200" "preload0 PEREGRINE_GEMV_RING_PRELOAD=0"
  "carve50 PEREGRINE_GEMV_RING_CARVEOUT=50" "group4 PEREGRINE_GEMV_RING_GROUP=4"
  "piece8 PEREGRINE_GEMV_RING_PIECE_KB=8" "splitrel0 PG_SPLIT_RELEASE=0"
  "gusm1 PEREGRINE_MOE_GU_FLAT_SM=1" "guflat2 PEREGRINE_MOE_GU_FLAT=2"
)
ab_step warmup moe_gpu_check qwen3-30b-a3b
ab_sweep 2 "qwen3-30b-a3b deepseek-v2-lite" "${settings[@]}"
