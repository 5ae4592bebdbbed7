# Queue job (tools/gpu/queue.sh), session 37: one-knob sweep of the decode step's env knobs
# around the defaults of a0f57c0 (Qwen3-30B-A3B and DeepSeek-V2-Lite 1 x 1K, two interleaved
# rounds, each setting against the base of its round), on whatever card the call gets (asked
# as nvidia-h200: the defaults were tuned on H100s since session 32's only H200 call); then
# FusedMatmulOp.* repeated 25 times with whole failure messages (s36i's one failure came under
# an experimental trigger that was reverted; this checks the code of main).
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check gemv_gpu_check
#   tools/gpu/make_job.sh s37b tools/gpu/jobs/s37b.sh 420 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     gemv_gpu_check=build/cuda/tests/models/gemv_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
settings=(
  "qkvfill1 PEREGRINE_GEMV_RING_QKV_FILL_INFLIGHT=1" "qkvfill3 PEREGRINE_GEMV_RING_QKV_FILL_INFLIGHT=3"
  "qkvfill0 PEREGRINE_GEMV_RING_QKV_FILL_INFLIGHT=0"
  "qkvdepth3 PEREGRINE_GEMV_RING_QKV_DEPTH=3" "qkvdepth6 PEREGRINE_GEMV_RING_QKV_DEPTH=6"
  "fill1 PEREGRINE_GEMV_RING_FILL_INFLIGHT=1" "fill3 PEREGRINE_GEMV_RING_FILL_INFLIGHT=3"
  "ofill1 PEREGRINE_RING_FILL_INFLIGHT=1" "ofill2 PEREGRINE_RING_FILL_INFLIGHT=2"
  "ofill4 PEREGRINE_RING_FILL_INFLIGHT=4"
  "depth4 PEREGRINE_GEMV_RING_DEPTH=4" "depth8 PEREGRINE_GEMV_RING_DEPTH=8"
  "budget160 PEREGRINE_GEMV_RING_BUDGET_KB=160" "budget224 PEREGRINE_GEMV_RING_BUDGET_KB=224"
  "guunroll4 PEREGRINE_MOE_GU_UNROLL=4" "guflat0 PEREGRINE_MOE_GU_FLAT=0"
  "walkwarps4 PEREGRINE_MOE_WALK_WARPS=4"
  "downrows1 PEREGRINE_MOE_DOWN_ROWS=1" "downrows2 PEREGRINE_MOE_DOWN_ROWS=2"
  "downrows8 PEREGRINE_MOE_DOWN_ROWS=8" "downwarps8 PEREGRINE_MOE_DOWN_WARPS=8"
  "downpre0 PEREGRINE_MOE_DOWN_PRELOAD=0"
  "l2after0 PEREGRINE_MOE_L2_AFTER_PCT=0" "l2after50 PEREGRINE_MOE_L2_AFTER_PCT=50"
  "xw0 PG_FUSED_XW=0" "splitkeys32 PG_FUSED_MIN_SPLIT_KEYS=32"
)
ab_sweep 2 "qwen3-30b-a3b deepseek-v2-lite" "${settings[@]}"
echo "== tests"
timeout 300 "$BIN/gemv_gpu_check" --gtest_filter='FusedMatmulOp.*' --gtest_repeat=25 > "$OUT/fm.txt" 2>&1
echo "rc $? passed-runs $(grep -c '^\[  PASSED  \]' "$OUT/fm.txt")"
grep -E -B2 -A14 '(Failure|FAILED)' "$OUT/fm.txt" | head -120
