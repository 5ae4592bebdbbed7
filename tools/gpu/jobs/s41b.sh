# Queue job (tools/gpu/queue.sh), session 41: the cluster plan's counter form for one sequence of a
# GQA group 5-8 past 8K keys (decode_fused_plan.cu ClusterSplitKeys: up to 32 splits a kv head of
# >= 384 keys, merged through the counter, to kCounterOneSeqMaxKeys = 12288) and the engine's
# 12288-key graph set (gpu_runner.h kDefaultDecodeKvBuckets), both new defaults, against the old
# rules in the same binary (PG_FUSED_COUNTER_MAX_KEYS=0: the streaming kernel past 8192 keys; and
# for the engine's sets also without the 12288 set, --kv-buckets 2048,4096,8192).
# Tests first: RopeKvWriteAttention.* (CudaPlansByLength's counter-form lengths, EveryBackend's
# 9000 / 11000-in-a-12288-plan / 13000 cases and its counter-form launch check).
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check fattn_gpu_check
#   tools/gpu/make_job.sh s41b tools/gpu/jobs/s41b.sh 420 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
echo "== fused attention tests at the defaults"
AB_TEST_TIMEOUT=200 ab_tests fattn_gpu_check 'RopeKvWriteAttention.*' | command grep -E 'Failure|Expected|PASSED|FAILED|differs' | head -12
m=qwen3-30b-a3b
old=(PG_FUSED_COUNTER_MAX_KEYS=0)
ab_step warmup moe_gpu_check $m
for r in 1 2; do
  for c in 8704 10240 12288; do
    export AB_CONTEXT=$c
    ab_step "new-c$c" moe_gpu_check $m
    ab_step "old-c$c" moe_gpu_check $m "${old[@]}"
  done
  unset AB_CONTEXT
  export AB_SERVE_CONTEXTS=8704,10240,12288,14336
  ab_serve new moe_gpu_check $m
  ab_serve old12 moe_gpu_check $m "${old[@]}"
  AB_ARGS="--kv-buckets 2048,4096,8192" ab_serve old moe_gpu_check $m "${old[@]}"
  unset AB_SERVE_CONTEXTS
done
echo "== 14K / 16K with the counter form's reach at 16384 (32 splits of 448 / 512 keys)"
for c in 14336 16384; do
  export AB_CONTEXT=$c
  ab_step "new-c$c" moe_gpu_check $m
  ab_step "c16k-c$c" moe_gpu_check $m PG_FUSED_COUNTER_MAX_KEYS=16384
done
unset AB_CONTEXT
echo "== 1K headline at the defaults"
ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
ab_step base-deepseek-v2-lite moe_gpu_check deepseek-v2-lite
