# Queue job (tools/gpu/queue.sh), session 42: the fused decode kernel's V copies as whole lines
# (PG_DECODE_V_LINES=1: a cp.async instruction copies two keys' 256-byte V rows, four full
# 128-byte lines, instead of one 32-byte sector of each of 16 keys). s42c's q split (two readers
# of every key) doubled the attention's time alone, so the loop may be bound by the requests,
# not the bytes. Tests with the knob on (every fused launch takes it), the attention alone
# (Qwen3-30B-A3B's geometry) both ways, then Qwen3-30B-A3B's step, graph at the context, two
# rounds interleaved.
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check fattn_gpu_check
#   tools/gpu/make_job.sh s42d tools/gpu/jobs/s42d.sh 360 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
echo "== fused attention tests with PG_DECODE_V_LINES=1"
AB_TEST_TIMEOUT=200 ab_tests fattn_gpu_check 'RopeKvWriteAttention.*' PG_DECODE_V_LINES=1 | command grep -E 'Failure|Expected|PASSED|FAILED|differs' | head -12
echo "== attention alone: defaults, then whole V lines"
b=(--bench --bf16 --batches=1 --kv-heads=4 --fused --contexts=1024,2048,4096,8192,12288)
"$BIN/fattn_gpu_check" "${b[@]}" 2>&1 | command grep -E "^  fused" | command grep -v @32K
PG_DECODE_V_LINES=1 "$BIN/fattn_gpu_check" "${b[@]}" 2>&1 | command grep -E "^  fused" | command grep -v @32K
m=qwen3-30b-a3b
ab_step warmup moe_gpu_check $m
for r in 1 2; do
  for c in 1024 2048 4096 8192 12288; do
    export AB_CONTEXT=$c
    ab_step "base-c$c" moe_gpu_check $m
    ab_step "vl-c$c" moe_gpu_check $m PG_DECODE_V_LINES=1
  done
  unset AB_CONTEXT
done
