# Queue job (tools/gpu/queue.sh): block timelines (-DPEREGRINE_BLOCK_TRACE=ON build) of one
# (Record only: the folded router measured slower and was reverted, docs/PERF.md "Session 28";
# its binaries come from commits 6eabba6 / fa45d1e.)
# Qwen3-30B-A3B 1 x 1K step with the folded router off / on (PEREGRINE_MOE_FOLD_ROUTER; session
# 28), per kernel kind the critical-path increment and the phases; then the router harness.
# Make it: ninja -C build/trace moe_gpu_check && ninja -C build/cuda moe_gpu_check
#   tools/gpu/make_job.sh fold_trace tools/gpu/jobs/fold_trace.sh 240 \
#     trace_moe_gpu_check=build/trace/tests/models/moe_gpu_check new_moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_tests new_moe_gpu_check 'MoeRouterOp.Fold*'
mkdir -p "$OUT/tr"
for mode in off on; do
  case $mode in
    off) env_args=(PEREGRINE_MOE_FOLD_ROUTER=0) ;;
    on) env_args=(PEREGRINE_MOE_FOLD_ROUTER=1) ;;
  esac
  env "${env_args[@]}" PEREGRINE_BLOCK_TRACE_OUT="$OUT/tr/$mode" timeout 90 "$BIN/trace_moe_gpu_check" \
    bench gpu-decode --load-format dummy --iters 20 --batch 1 --context 1024 \
    --model configs/qwen3-30b-a3b/config.json 2>&1 | command tr '\r' '\n' | command grep -E '^ +1 +1024 '
  f="$OUT/tr/$mode/trace_b1_c1024.csv"
  [[ -f "$f" ]] || { echo "no trace for $mode"; continue; }
  echo "== $mode: per kernel kind"; python3 tools/gpu/block_timeline.py "$f"
  echo "== $mode: launches of two middle layers"; python3 tools/gpu/block_timeline.py "$f" --launches | sed -n '2,3p;150,166p'
  echo "== $mode: phases"; python3 tools/gpu/block_timeline.py "$f" --phases | head -60
  gzip -f "$f"
done
