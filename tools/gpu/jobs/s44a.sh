# Queue job (tools/gpu/queue.sh; run in session 44 from branch s44/stages, binaries 0f973ed), session 44: is the cluster plan's loop form (Qwen3-30B-A3B,
# 4K-8K keys, 64 blocks, ~1.4 µs a 16-key tile a warp) bound by its bytes in flight over the
# HBM's round trip? Its two-stage ring keeps one tile (8 KB a warp) in flight while the other
# is computed. Session 43's two answers both had a flaw: the probe's first version computed each
# load's address with runtime divisions and a global page-table read, and the three-stage loop
# was timed only in the step, where its 106.6 KB blocks crowd out the o projection's ring.
# Rows, in order of worth:
#  1. PG_FUSED_KV_SPLIT=1 (this branch): each stage's K and V halves as their own cp.async
#     groups, each refilled once its use ends: 12 of a warp's 16 KB in flight on average, same
#     shared memory (so the o ring keeps its 4 slots). Tests (every value must match), then the
#     step at 4K / 8K against the defaults, two rounds.
#  2. The fused attention alone (fattn_gpu_check --bench --fused, no o projection) at one, two
#     and three stages and with the split ring: with t1 = L + C and t2 ~ max(L, C) a tile (L the
#     round trip, C a tile's compute), three stages at ~max(C, L / 2) say the rings are the lever.
#  3. The fixed --chase (one load's round trip, HBM and L2) and the fixed probe (shared-memory
#     page bases, a flat row: the grid's own rate) at 8 and 32 loads a thread; L2-prefetch rows.
# Binaries of branch s44/stages (s43/ring3's knobs + this knob, all off by default, + main's
# probe fix); the H200 headline (tools/gpu/if_h200_headline.sh) runs on its moe_gpu_check, whose
# defaults are main's.
#   git checkout s44/stages && ninja -C build/cuda fattn_gpu_check moe_gpu_check
#   tools/gpu/make_job.sh s44a tools/gpu/jobs/s44a.sh 300 fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check \
#     moe_gpu_check=build/cuda/tests/models/moe_gpu_check
# (Written with ab_fused_tests / ab_ctx_pairs since session 45's review: the same rows in the
# same order as the loops it ran.)
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
echo "== fused attention tests, PG_FUSED_KV_SPLIT=1"
AB_TEST_TIMEOUT=90 ab_fused_tests 'RopeKvWriteAttention.EveryBackend*' PG_FUSED_KV_SPLIT=1
ab_ctx_pairs 2 "4096 8192" qwen3-30b-a3b base kvs PG_FUSED_KV_SPLIT=1
fa=(--bench --bf16 --batches=1 --kv-heads=4 --fused --contexts=2048,4096,8192)
for kn in PG_FUSED_CLUSTER_STAGES=2 PG_FUSED_KV_SPLIT=1 PG_FUSED_CLUSTER_STAGES=3 PG_FUSED_CLUSTER_STAGES=1 \
          PG_DECODE_L2_PREFETCH=2; do
  echo "== fused attention alone, $kn"
  env $kn timeout 60 "$BIN/fattn_gpu_check" "${fa[@]}" 2>&1 | command grep -E "fused|^bf16|keys|floor"
done
p=(--bench --kv-layout-probe --kv-heads=4)
echo "== chase, and the probe at 8 loads a thread"
timeout 60 "$BIN/fattn_gpu_check" "${p[@]}" --contexts=4096,8192,16384 --chase
echo "== the probe at 32 loads a thread"
timeout 40 "$BIN/fattn_gpu_check" "${p[@]}" --contexts=4096,8192,16384 --loads=32
echo "== the probe, one copy (L2-warm)"
timeout 40 "$BIN/fattn_gpu_check" "${p[@]}" --contexts=8192 --warm
