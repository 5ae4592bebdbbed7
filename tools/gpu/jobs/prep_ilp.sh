# Queue job (tools/gpu/queue.sh) for branch s24/prep-rows-ilp (the streaming attention's
# new-token preparation takes its q rows 4 a trip): the decode tests on the branch, then
# 1 x 32K step rows of Llama-3.1-8B and Qwen3-30B-A3B against main, interleaved.
# Make it as tools/gpu/jobs/o_dots.sh says: fattn_gpu_check built on main (/tmp/base_fattn) and on
# the branch (/tmp/new_fattn), then
#   tools/gpu/make_job.sh prep_ilp tools/gpu/jobs/prep_ilp.sh 300 base_fattn_gpu_check=/tmp/base_fattn \
#     new_fattn_gpu_check=/tmp/new_fattn
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
"$BIN/new_fattn_gpu_check" --gtest_filter='RopeKvWriteAttention.*:DecodeAttention.*' 2>&1 |
  grep -E '^\[ +(FAILED|PASSED) |Failure' | tail -10
export AB_CONTEXT=32768
for r in 1 2 3; do
  for m in llama-3.1-8b qwen3-30b-a3b; do
    ab_step "base-$m" base_fattn_gpu_check "$m"
    ab_step "ilp-$m" new_fattn_gpu_check "$m"
  done
done
