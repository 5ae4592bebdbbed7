# Queue job (tools/gpu/queue.sh), session 40: the binary with s40b's two defaults — the cluster
# plan's loop form at two ring stages a warp past 2K keys (PG_FUSED_CLUSTER_STAGES=2), one
# sequence of a GQA group 5-8 on the cluster plan up to 8192 keys (streaming from 8193;
# kClusterOneSeqMaxKeys) — against the old rules by knobs in the same binary
# (PG_FUSED_CLUSTER_STAGES=1 PG_FUSED_CLUSTER_MAX_KEYS=4096 PG_DSTREAM_FUSED_MIN_KEYS=4097).
# Tests at the defaults: RopeKvWriteAttention.* (the 3500 / 6000-key cluster cases, the loop
# form's launch count, CudaPlansByLength) and every moe_gpu_check test. Rows: Qwen3-30B-A3B graph
# at the exact context, two rounds; the engine's graph sets; controls at the defaults.
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check fattn_gpu_check
#   tools/gpu/make_job.sh s40c tools/gpu/jobs/s40c.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
echo "== fused attention tests"
AB_TEST_TIMEOUT=150 ab_tests fattn_gpu_check 'RopeKvWriteAttention.*' | tail -4
echo "== moe tests"
AB_TEST_TIMEOUT=150 ab_tests moe_gpu_check '*' | tail -4
m=qwen3-30b-a3b
old=(PG_FUSED_CLUSTER_STAGES=1 PG_FUSED_CLUSTER_MAX_KEYS=4096 PG_DSTREAM_FUSED_MIN_KEYS=4097)
ab_step warmup moe_gpu_check $m
for r in 1 2; do
  for c in 3072 4096 6144 8192 12288; do
    export AB_CONTEXT=$c
    ab_step "old-c$c" moe_gpu_check $m "${old[@]}"
    ab_step "new-c$c" moe_gpu_check $m
  done
  unset AB_CONTEXT
done
AB_SERVE_CONTEXTS=1024,2048,3072,4096,6144,8192,12288 ab_serve old moe_gpu_check $m "${old[@]}"
AB_SERVE_CONTEXTS=1024,2048,3072,4096,6144,8192,12288 ab_serve new moe_gpu_check $m
for c in 1024 2048; do AB_CONTEXT=$c ab_step "head-c$c" moe_gpu_check $m; done
ab_step head-v2lite-c1024 moe_gpu_check deepseek-v2-lite
AB_CONTEXT=6144 ab_step head-llama-c6144 moe_gpu_check llama-3.1-8b
