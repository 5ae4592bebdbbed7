# Queue job (tools/gpu/queue.sh), written in session 40, not yet run: knob probes for Qwen3-30B-A3B's
# one-sequence step at 4K-16K keys past b8c660f's defaults (docs/design/decode-latency.md "Measured
# in session 40"). No new kernel code, only knobs:
#   c32: the fused kernel's cluster-plan grid at 32 splits a kv head (PG_FUSED_CLUSTER_FIT=0 with
#        PG_FUSED_MIN_SPLIT_KEYS = max_len / 32), two ring stages a warp, merged through the
#        counter (more than 16 splits fit no cluster), to 16K keys (PG_FUSED_CLUSTER_MAX_KEYS,
#        PG_DSTREAM_FUSED_MIN_KEYS=0): twice the blocks of the default's one cluster a kv head.
#        If it beats the streaming kernel at 12K / 16K, two clusters a kv head (a cheaper merge)
#        is worth building.
#   s0:  PG_FUSED_SMALL=0: the 3-stage kernel (three ring stages a warp, ~102 KB a block, the
#        counter merge) on the same 16-split grid.
# Tests: EveryBackendMatchesComposition under the c32 knobs (every value must match; only the
# structural check that some case reaches the streaming kernel fails, as the knob turns it off)
# and under PG_FUSED_SMALL=0 (structural checks of the small variant's forms may fail by design).
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check fattn_gpu_check
#   tools/gpu/make_job.sh s41a tools/gpu/jobs/s41a.sh 400 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
echo "== fused attention tests at the defaults (6f41549's review: same plans, CudaPlansByLength checks them)"
AB_TEST_TIMEOUT=200 ab_tests fattn_gpu_check 'RopeKvWriteAttention.*' | command grep -E 'Failure|Expected|PASSED|FAILED|differs' | head -12
c32=(PG_FUSED_CLUSTER_FIT=0 PG_FUSED_CLUSTER_MAX_KEYS=16384 PG_DSTREAM_FUSED_MIN_KEYS=0)
echo "== fused attention tests (c32 knobs at 384 keys a split; the streaming check fails by design)"
AB_TEST_TIMEOUT=200 ab_tests fattn_gpu_check 'RopeKvWriteAttention.EveryBackend*' "${c32[@]}" \
  PG_FUSED_MIN_SPLIT_KEYS=384 | command grep -E 'Failure|Expected|PASSED|FAILED|differs' | head -12
echo "== fused attention tests (PG_FUSED_SMALL=0)"
AB_TEST_TIMEOUT=200 ab_tests fattn_gpu_check 'RopeKvWriteAttention.EveryBackend*' PG_FUSED_SMALL=0 |
  command grep -E 'Failure|Expected|PASSED|FAILED|differs' | head -12
m=qwen3-30b-a3b
ab_step warmup moe_gpu_check $m
for r in 1 2; do
  for c in 4096 6144 8192 12288 16384; do
    export AB_CONTEXT=$c
    ab_step "base-c$c" moe_gpu_check $m
    ab_step "c32-c$c" moe_gpu_check $m "${c32[@]}" PG_FUSED_MIN_SPLIT_KEYS=$((c / 32))
    ((c <= 8192)) && ab_step "s0-c$c" moe_gpu_check $m PG_FUSED_SMALL=0
  done
  unset AB_CONTEXT
done
