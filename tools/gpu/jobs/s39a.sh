# Queue job (tools/gpu/queue.sh), session 39: (1) NormLogits' warps share the normed row through
# shared memory (moe_router.cu kShare, MoeTuning::walk_nl_share, default on; each warp normalises
# a quarter of the row instead of all of it; the same bits) against the old form
# (PEREGRINE_MOE_NL_SHARE=0) in one binary, three rounds after a warm-up; (2) the engine's serving
# graph sets (kv buckets 2048 / 4096 / 8192 / 32768) against graphs captured at the exact context,
# Qwen3-30B-A3B and DeepSeek-V2-Lite, 1K to 32K keys; (3) the MoE / router tests; (4) a trace.
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check && ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh s39a tools/gpu/jobs/s39a.sh 420 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     moe_trace=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ab_hbm
ab_step warmup moe_gpu_check qwen3-30b-a3b
for r in 1 2 3; do
  for m in qwen3-30b-a3b deepseek-v2-lite moonlight-16b-a3b; do
    ab_step "share-$m" moe_gpu_check "$m"
    ab_step "noshare-$m" moe_gpu_check "$m" PEREGRINE_MOE_NL_SHARE=0
  done
done
echo "== tests"
AB_TEST_TIMEOUT=200 ab_tests moe_gpu_check 'MoeExpertsOp.*:MoeRouterOp.*:GpuModelGolden.Tiny*' | tail -3
echo "== serving graph sets against exact captures"
for m in qwen3-30b-a3b deepseek-v2-lite; do
  AB_SERVE_CONTEXTS=1024,2048,3072,4096,12288,16384,32768 ab_serve "served-$m" moe_gpu_check "$m"
  for c in 2048 3072 4096 12288 16384 32768; do AB_CONTEXT=$c ab_step "exact$c-$m" moe_gpu_check "$m"; done
done
AB_TRACE_PHASES=0 ab_trace share moe_trace qwen3-30b-a3b | command grep -v -E '^ +1 +1024' | command sed -n '1,14p'
zcat "$OUT/tr/share/trace_b1_c1024.csv.gz" > /tmp/share.csv && cp "$OUT/tr/share/trace_b1_c1024.csv.gz" "$OUT/share.csv.gz"
python3 tools/gpu/block_timeline.py /tmp/share.csv --phases | command grep -A6 -E '^-- (norm_logits|router)'
