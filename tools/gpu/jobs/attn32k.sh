# Queue job (tools/gpu/queue.sh) for the two unmeasured long-context changes of issue 6 at
# 1 x 32K (the headline's one row below 90% on the machine's slow level):
#   ilp: branch s26/prep-rows-ilp (session 24's s24/prep-rows-ilp on 98830d2: the streaming
#        kernel's new-token preparation takes its q rows 4 a trip; only the 4 fused streaming
#        kernels differ from base, cuobjdump -sass);
#   l2:  the streaming kernel asking the L2 for the o projection's weights once its producer
#        has issued its last cache stage (session 26; RopeKvWriteAttentionParams::l2_after,
#        PEREGRINE_ATTN_L2_AFTER_PCT = the share of each o block's slice, default 0 = off).
# "base" is main before session 26 (98830d2).
# Make it (here, from the repo root; build/cuda shares ccache across checkouts):
#   git checkout 98830d2 && ninja -C build/cuda fattn_gpu_check && cp build/cuda/tests/models/fattn_gpu_check /tmp/base_fattn
#   git checkout s26/prep-rows-ilp && ninja -C build/cuda fattn_gpu_check && cp build/cuda/tests/models/fattn_gpu_check /tmp/ilp_fattn
#   git checkout main && ninja -C build/cuda fattn_gpu_check
#   tools/gpu/make_job.sh attn32k tools/gpu/jobs/attn32k.sh 560 base_fattn_gpu_check=/tmp/base_fattn \
#     ilp_fattn_gpu_check=/tmp/ilp_fattn new_fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check
# Device: run(command="QUEUE_BUDGET=580 JOBS=attn32k tools/gpu/queue.sh >/dev/null 2>&1; tar -xzf
#   $OUT/attn32k.tgz -C $OUT; cat $OUT/attn32k/log.txt; python3 tools/gpu/ab_summary.py $OUT/attn32k/log.txt", carry=[".gpulib", ".gpuq/attn32k"]).
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
# (Only the fused op's tests: the unfused decode kernels are main's code in both binaries.)
echo "== tests: the l2 binary (its new test and the fused attention), the ilp branch"
ab_tests new_fattn_gpu_check 'RopeKvWriteAttention.*'
ab_tests ilp_fattn_gpu_check 'RopeKvWriteAttention.EveryBackend*'
echo "== step rows, batch 1 x 32K (us a step, floor/t)"
export AB_CONTEXT=32768 AB_TIMEOUT=90
for r in 1 2; do
  for m in llama-3.1-8b qwen3-30b-a3b; do
    ab_step "base-$m" base_fattn_gpu_check "$m"
    ab_step "ilp-$m" ilp_fattn_gpu_check "$m"
    ab_step "l2off-$m" new_fattn_gpu_check "$m"
    ab_step "l2-100-$m" new_fattn_gpu_check "$m" PEREGRINE_ATTN_L2_AFTER_PCT=100
  done
  ab_step "l2-50-llama-3.1-8b" new_fattn_gpu_check llama-3.1-8b PEREGRINE_ATTN_L2_AFTER_PCT=50
  ab_step "l2-25-llama-3.1-8b" new_fattn_gpu_check llama-3.1-8b PEREGRINE_ATTN_L2_AFTER_PCT=25
done
