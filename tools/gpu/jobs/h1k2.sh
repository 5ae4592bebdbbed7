# Queue job (tools/gpu/queue.sh), session 32, second H100 sweep (binaries of hl32, ab7f6e0): the
# gate/up kernel at 8 warps a block (h1k: -22 us on Qwen3 b1) alone and with other knobs, the
# GEMV ring's and the attention's remaining knobs, then batch 1-8 sweeps with 4 / 8 warps.
# Make it: tools/gpu/make_job.sh h1k2 tools/gpu/jobs/h1k2.sh 560 moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "binaries of: $(cat "$JOB/commit" 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
q() { ab_step "$1" moe_gpu_check qwen3-30b-a3b "${@:2}"; }
v() { ab_step "$1" moe_gpu_check deepseek-v2-lite "${@:2}"; }
W=PEREGRINE_MOE_WALK_WARPS=8
for r in 1 2 3; do
  q base
  q w8 $W
  q w8-dw8 $W PEREGRINE_MOE_DOWN_WARPS=8
  q w8-split32 $W PG_FUSED_MIN_SPLIT_KEYS=32
  q w8-l2a12 $W PEREGRINE_MOE_L2_AFTER_PCT=12
  q piece2 PEREGRINE_GEMV_RING_PIECE_KB=2
  q piece8 PEREGRINE_GEMV_RING_PIECE_KB=8
  q budget160 PEREGRINE_GEMV_RING_BUDGET_KB=160
  q sleep100 PEREGRINE_GEMV_RING_PRODUCER_SLEEP_NS=100
  q lateprod PEREGRINE_GEMV_RING_LATE_PRODUCER=1
  q oneRow0 PEREGRINE_BF16_RING_MMA_ONE_ROW=0
  q release0 PG_SPLIT_RELEASE=0
  q pdllate1 PG_FUSED_PDL_LATE=1
  q fusedrouter PEREGRINE_MOE_FUSED_ROUTER=1
  q selfroute2 PEREGRINE_MOE_SELF_ROUTE=2
  q xw3 PG_FUSED_XW=3
  v v-base
  v v-w8 $W
done
for w in 4 8; do
  for r in 1 2; do
    echo "== qwen3 sweep, walk warps $w, round $r"
    PEREGRINE_MOE_WALK_WARPS=$w timeout 60 "$BIN/moe_gpu_check" bench gpu-decode --load-format dummy \
      --iters 20 --batch 1,2,4,8 --context 1024 --model configs/qwen3-30b-a3b/config.json 2>&1 |
      tr '\r' '\n' | grep -E "^ +(1|2|4|8) +1024 " | sort -u
    echo "== v2-lite sweep, walk warps $w, round $r"
    PEREGRINE_MOE_WALK_WARPS=$w timeout 60 "$BIN/moe_gpu_check" bench gpu-decode --load-format dummy \
      --iters 20 --batch 1,2,4 --context 1024 --model configs/deepseek-v2-lite/config.json 2>&1 |
      tr '\r' '\n' | grep -E "^ +(1|2|4) +1024 " | sort -u
  done
done
