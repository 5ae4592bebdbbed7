# Queue job (tools/gpu/queue.sh), written in session 41 on branch s42/reach14k, not yet run: the
# counter form's reach at 14336 keys with a 14336-key graph set instead of main's 12288 (both as
# the branch's defaults), against main's rules by knobs in the same binary
# (PG_FUSED_COUNTER_MAX_KEYS=12288 --kv-buckets 2048,4096,8192,12288), Qwen3-30B-A3B, the
# engine's graph sets, three rounds; graph at 14336 / 16384 (streaming at 16K in both). Tests
# first: RopeKvWriteAttention.* (CudaPlansByLength at 14336 / 14337; EveryBackend's 13000-key
# case in a 14336-key plan and 15000-key streaming case). Knob runs measured in session 41:
# -11 to -49 µs at 13-14K, +5 to +8 at 10-12K.
# Make it on the branch:
#   ninja -C build/cuda moe_gpu_check fattn_gpu_check
#   tools/gpu/make_job.sh s42a tools/gpu/jobs/s42a.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
echo "== fused attention tests at the defaults"
AB_TEST_TIMEOUT=200 ab_tests fattn_gpu_check 'RopeKvWriteAttention.*' | command grep -E 'Failure|Expected|PASSED|FAILED|differs' | head -12
m=qwen3-30b-a3b
ab_step warmup moe_gpu_check $m
export AB_SERVE_CONTEXTS=8704,10240,11264,12288,13312,14336,16384
for r in 1 2 3; do
  ab_serve new moe_gpu_check $m
  AB_ARGS="--kv-buckets 2048,4096,8192,12288" ab_serve main moe_gpu_check $m PG_FUSED_COUNTER_MAX_KEYS=12288
done
unset AB_SERVE_CONTEXTS
for c in 14336 16384; do
  export AB_CONTEXT=$c
  ab_step "new-c$c" moe_gpu_check $m
  ab_step "main-c$c" moe_gpu_check $m PG_FUSED_COUNTER_MAX_KEYS=12288
done
unset AB_CONTEXT
echo "== 1K headline at the defaults"
ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
ab_step base-deepseek-v2-lite moe_gpu_check deepseek-v2-lite
