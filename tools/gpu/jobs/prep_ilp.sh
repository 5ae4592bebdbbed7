# Queue job (tools/gpu/queue.sh) for branch s24/prep-rows-ilp (the streaming attention's
# new-token preparation takes its q rows 4 a trip): the decode tests on the branch, then
# 1 x 32K step rows of Llama-3.1-8B and Qwen3-30B-A3B against main, interleaved.
# Make it as tools/gpu/jobs/o_dots.sh says, with fattn_gpu_check (base from main, new from
# the branch) in .gpuq/prep_ilp/bin/{base,new}_fattn_gpu_check.xz, timeout 300.
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
