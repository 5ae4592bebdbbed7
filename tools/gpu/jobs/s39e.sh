# Queue job (tools/gpu/queue.sh), session 39: HEAD with the two new defaults — the cluster plan's
# grid fits one cluster a kv head above 1K keys with two stages up to 2K (PG_FUSED_CLUSTER_FIT=2),
# and one bf16 sequence past 4096 keys on the streaming kernel (DecodeStreamPreferred) — both
# measured as knobs in s39d and its two follow-up calls. The fused attention's tests (with the new
# RopeKvWriteAttention.CudaPlansByLength and the 6000-key case) and every
# moe_gpu_check test at the defaults; rows: Qwen3-30B-A3B at 1K / 2K / 8K, DeepSeek-V2-Lite at 1K,
# Llama-3.1-8B at 8K, the engine's graph sets for Qwen3 at 1K / 2K / 4K / 8K.
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check fattn_gpu_check
#   tools/gpu/make_job.sh s39e tools/gpu/jobs/s39e.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
echo "== fused attention tests"
AB_TEST_TIMEOUT=150 ab_tests fattn_gpu_check 'RopeKvWriteAttention.*' | tail -3
echo "== moe tests"
AB_TEST_TIMEOUT=150 ab_tests moe_gpu_check '*' | tail -4
m=qwen3-30b-a3b
for c in 1024 2048 8192; do AB_CONTEXT=$c ab_step "head-c$c" moe_gpu_check $m; done
ab_step head-v2lite-c1024 moe_gpu_check deepseek-v2-lite
AB_CONTEXT=8192 ab_step head-llama-c8192 moe_gpu_check llama-3.1-8b
AB_SERVE_CONTEXTS=1024,2048,4096,8192 ab_serve "head-$m" moe_gpu_check $m
