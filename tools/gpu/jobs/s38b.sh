# Queue job (tools/gpu/queue.sh), session 38: the normed one-row GEMV (DeepSeek-V2-Lite's and
# Moonlight's q + kv_a, 3648 x 2048; the logit heads) with its warps' second weight group issued
# earlier (PEREGRINE_GEMV_VEC_PRE, gemv.cu kPre): 1 = before PdlWait (a 2048-wide row wholly in
# registers before the wait), 2 = right after the wait, before the norm's staging; 0 = as
# before (in the dot loop, after the staging). s37k's trace: this kernel's post-wait time 5.1 us
# for ~2.5 us of bytes left after the wait. Three interleaved rounds after a warm-up, then a
# block trace of V2-Lite at 0 and 1.
# (Ran in session 38; the code is on branch s38/gemv-vec-pre.)
# Make it on that branch:
#   ninja -C build/cuda moe_gpu_check && ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh s38b tools/gpu/jobs/s38b.sh 420 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     moe_trace=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ab_step warmup moe_gpu_check deepseek-v2-lite
for r in 1 2 3; do
  for m in deepseek-v2-lite moonlight-16b-a3b; do
    ab_step "base-$m" moe_gpu_check "$m"
    ab_step "pre1-$m" moe_gpu_check "$m" PEREGRINE_GEMV_VEC_PRE=1
    ab_step "pre2-$m" moe_gpu_check "$m" PEREGRINE_GEMV_VEC_PRE=2
  done
done
for r in 1 2; do
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step pre1-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_GEMV_VEC_PRE=1
done
echo "== tests"
for p in 1 2; do
  AB_TEST_TIMEOUT=200 ab_tests moe_gpu_check 'GpuModelGolden.Tiny*:MlaOp*:MoeExpertsOp.*' PEREGRINE_GEMV_VEC_PRE=$p | tail -3
done
AB_TRACE_LAUNCHES=1 AB_TRACE_PHASES=0 ab_trace base moe_trace deepseek-v2-lite | command grep -v -E '^ +1 +1024' | head -40
AB_TRACE_LAUNCHES=1 AB_TRACE_PHASES=0 ab_trace pre1 moe_trace deepseek-v2-lite PEREGRINE_GEMV_VEC_PRE=1 | command grep -v -E '^ +1 +1024' | head -40
