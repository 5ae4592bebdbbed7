# Queue job (tools/gpu/queue.sh; run in session 44 from branch s44/stages, binaries caf7e69), session 44, after s44a (H100): the loop form's split ring won
# (Its rows showed the copies, not the math, set the loop's pace: docs/PERF.md "Session 44", 4.)
# 31-39 µs a step at 4K and 8K, and the loop form alone is not bound by its bytes in flight
# (three stages: no faster a tile; one stage: 1.78 µs a tile against 1.41 at two, with the
# chase's HBM round trip at 0.35 µs, so ~1.4 µs a tile of a warp is its math). This job:
#  1. the split ring as the default (this branch): the fused attention tests, and the step
#     at 1K-12K against PG_FUSED_KV_SPLIT=0, two rounds;
#  2. the loop alone with PG_FUSED_LOOP_PROBE=1 (no tile issued in the loop: the math alone) and
#     =2 (no math: the copies alone), =3 (no copies, no PV), =4 (no copies, QK alone), 4K / 8K keys;
#  3. the SM clock the card reports (read only).
#   git checkout s44/stages && ninja -C build/cuda fattn_gpu_check moe_gpu_check
#   tools/gpu/make_job.sh s44b tools/gpu/jobs/s44b.sh 300 fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check \
#     moe_gpu_check=build/cuda/tests/models/moe_gpu_check
# (Written with ab_fused_tests / ab_ctx_pairs since session 45's review: the same rows in the
# same order as the loops it ran.)
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit --format=csv
echo "== fused attention tests at the defaults (split ring on)"
ab_fused_tests
fa=(--bench --bf16 --batches=1 --kv-heads=4 --fused --contexts=4096,8192)
for kn in PG_FUSED_LOOP_PROBE=0 PG_FUSED_LOOP_PROBE=1 PG_FUSED_LOOP_PROBE=2 PG_FUSED_LOOP_PROBE=3 \
          PG_FUSED_LOOP_PROBE=4 PG_FUSED_KV_SPLIT=0; do
  echo "== fused attention alone, $kn"
  env $kn timeout 60 "$BIN/fattn_gpu_check" "${fa[@]}" 2>&1 | command grep -E "^  fused bf16 +[0-9]+ "
done
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv,noheader
ab_ctx_pairs 2 "1024 4096 6144 8192 12288" qwen3-30b-a3b split old PG_FUSED_KV_SPLIT=0
