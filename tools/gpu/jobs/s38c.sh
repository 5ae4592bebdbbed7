# Queue job (tools/gpu/queue.sh), session 38: s38b again with PEREGRINE_GEMV_VEC_PRE confined to
# projections (m <= 16384: s38b's rows also moved the logit heads, Qwen3-30B-A3B +37 us from its
# head alone), kPre = 1 now under __launch_bounds__(256, 4), and -1 = no weight load before
# PdlWait at all (s38b's trace: the wait's release came later, 2.6-3.4 us after the down
# kernel's end, with more weight reads in flight). A diagnostic line per launch form
# (PEREGRINE_GEMV_VEC_DIAG: registers, blocks an SM, grid) for the model steps.
# (Ran in session 38; the code is on branch s38/gemv-vec-pre.)
# Make it on that branch:
#   ninja -C build/cuda moe_gpu_check && ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh s38c tools/gpu/jobs/s38c.sh 420 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     moe_trace=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
for p in 0 1 -1; do
  echo "== diag pre=$p"
  PEREGRINE_GEMV_VEC_DIAG=1 PEREGRINE_GEMV_VEC_PRE=$p timeout 60 "$BIN/moe_gpu_check" bench gpu-decode --load-format dummy \
    --iters 3 --batch 1 --context 1024 --model configs/deepseek-v2-lite/config.json 2>&1 | command grep GEMV_VEC_DIAG | sort | uniq -c | head
  PEREGRINE_GEMV_VEC_DIAG=1 PEREGRINE_GEMV_VEC_PRE=$p timeout 60 "$BIN/moe_trace" bench gpu-decode --load-format dummy \
    --iters 3 --batch 1 --context 1024 --model configs/deepseek-v2-lite/config.json 2>&1 | command grep GEMV_VEC_DIAG | sort | uniq -c | head -3
done
ab_step warmup moe_gpu_check deepseek-v2-lite
for r in 1 2 3; do
  for m in deepseek-v2-lite moonlight-16b-a3b; do
    ab_step "base-$m" moe_gpu_check "$m"
    ab_step "pre1-$m" moe_gpu_check "$m" PEREGRINE_GEMV_VEC_PRE=1
    ab_step "pre2-$m" moe_gpu_check "$m" PEREGRINE_GEMV_VEC_PRE=2
    ab_step "late-$m" moe_gpu_check "$m" PEREGRINE_GEMV_VEC_PRE=-1
  done
done
AB_TRACE_LAUNCHES=1 AB_TRACE_PHASES=0 ab_trace base moe_trace deepseek-v2-lite | command grep -v -E '^ +1 +1024' | command sed -n '1,30p'
AB_TRACE_LAUNCHES=1 AB_TRACE_PHASES=0 ab_trace late moe_trace deepseek-v2-lite PEREGRINE_GEMV_VEC_PRE=-1 | command grep -v -E '^ +1 +1024' | command sed -n '1,30p'
AB_TRACE_LAUNCHES=1 AB_TRACE_PHASES=0 ab_trace pre1 moe_trace deepseek-v2-lite PEREGRINE_GEMV_VEC_PRE=1 | command grep -v -E '^ +1 +1024' | command sed -n '1,30p'
