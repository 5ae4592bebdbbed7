# Queue job (tools/gpu/queue.sh), session 40: the fused attention's cluster plan past 2K keys at
# two ring stages a warp in the loop form (PG_FUSED_CLUSTER_STAGES=2; the kernel with two q rows
# a warp prepared in registers for groups 5-8), and the cluster plan past 4K keys in place of
# the streaming kernel + combine (PG_FUSED_CLUSTER_MAX_KEYS, PG_DSTREAM_FUSED_MIN_KEYS=0). s40a's
# trace (H100, Qwen3-30B-A3B): the attention at 4K 17.3 µs after its wait against 9.5 at 1K (one
# stage a warp: four tiles loaded and computed in turn); at 6K the streaming kernel 12.8-13.1 +
# the combine 2.6 + the o projection 7.0-7.3 (it preloads 3.5 µs instead of 12).
# Tests: RopeKvWriteAttention.* at the default and with the knob (the new 3500-key case);
# rows: graph at the exact context, two rounds.
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check fattn_gpu_check
#   tools/gpu/make_job.sh s40b tools/gpu/jobs/s40b.sh 400 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
echo "== fused attention tests (default)"
AB_TEST_TIMEOUT=150 ab_tests fattn_gpu_check 'RopeKvWriteAttention.*' | tail -3
echo "== fused attention tests (PG_FUSED_CLUSTER_STAGES=2)"
AB_TEST_TIMEOUT=150 ab_tests fattn_gpu_check 'RopeKvWriteAttention.EveryBackend*' PG_FUSED_CLUSTER_STAGES=2 | tail -3
echo "== fused attention tests (cluster plan to 8K, two stages)"
AB_TEST_TIMEOUT=150 ab_tests fattn_gpu_check 'RopeKvWriteAttention.EveryBackend*' PG_FUSED_CLUSTER_STAGES=2 \
  PG_FUSED_CLUSTER_MAX_KEYS=8192 PG_DSTREAM_FUSED_MIN_KEYS=0 | tail -3
m=qwen3-30b-a3b
ab_step warmup moe_gpu_check $m
for r in 1 2; do
  for c in 3072 4096; do
    export AB_CONTEXT=$c
    ab_step "base-c$c" moe_gpu_check $m
    ab_step "st2-c$c" moe_gpu_check $m PG_FUSED_CLUSTER_STAGES=2
  done
  for c in 6144 8192; do
    export AB_CONTEXT=$c
    ab_step "base-c$c" moe_gpu_check $m
    ab_step "cl1-c$c" moe_gpu_check $m PG_FUSED_CLUSTER_MAX_KEYS=8192 PG_DSTREAM_FUSED_MIN_KEYS=0
    ab_step "cl2-c$c" moe_gpu_check $m PG_FUSED_CLUSTER_STAGES=2 PG_FUSED_CLUSTER_MAX_KEYS=8192 PG_DSTREAM_FUSED_MIN_KEYS=0
  done
  unset AB_CONTEXT
done
AB_SERVE_CONTEXTS=3072,4096 ab_serve "base-$m" moe_gpu_check $m
AB_SERVE_CONTEXTS=3072,4096 ab_serve "st2-$m" moe_gpu_check $m PG_FUSED_CLUSTER_STAGES=2
