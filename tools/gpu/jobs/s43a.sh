# Queue job (tools/gpu/queue.sh), written in session 42, not yet run: the KV layout probe
# (fattn_gpu_check --bench --kv-layout-probe; tests/ops/bench_kv_layout.cu). Session 42 found the
# fused attention's loop form reading at ~1.4 TB/s on 64 per-kv-head blocks, twice the time when
# two blocks read every key (the q split, s42c) and slower with whole-line V copies (s42d). The
# probe reads exactly the cluster plan's keys (kv heads x 16 or 32 splits, K and V, 8 loads in
# flight a thread, nothing else) from the cache's token-major pages (a head's 256-byte row in
# every kv_heads x 256 bytes) and from head-major pages (a head's 16 rows of a page contiguous),
# pages in order and shuffled, Qwen3-30B-A3B's 4 kv heads and Llama's 8. If head-major reads
# much faster, the cache layout is the lead; if both read near the D2D rate, the kernel's loop
# is (its cp.async pattern, its ring depth). Then the unfused tensor-core kernel alone with the
# streaming kernel off (PG_DECODE_STREAM=0): head warps (a block reads whole tokens, all kv
# heads) against the round-robin layout (a block a kv head), attention rows only.
# Make it at HEAD:
#   ninja -C build/cuda fattn_gpu_check
#   tools/gpu/make_job.sh s43a tools/gpu/jobs/s43a.sh 240 fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
p=(--bench --kv-layout-probe --contexts=4096,8192,16384)
for kvh in 4 8; do
  timeout 120 "$BIN/fattn_gpu_check" "${p[@]}" --kv-heads=$kvh
  timeout 120 "$BIN/fattn_gpu_check" "${p[@]}" --kv-heads=$kvh --shuffle | command tail -n +2
done
b=(--bench --bf16 --batches=1 --kv-heads=4 --contexts=4096,8192,16384)
echo "== unfused tensor-core kernel, head warps (default) vs round robin, streaming off"
PG_DECODE_STREAM=0 timeout 120 "$BIN/fattn_gpu_check" "${b[@]}" 2>&1 | command grep -E "^bf16" | command grep -v @32K
PG_DECODE_STREAM=0 PG_DECODE_MMA_ROUND_ROBIN=1 timeout 120 "$BIN/fattn_gpu_check" "${b[@]}" 2>&1 |
  command grep -E "^bf16" | command grep -v @32K
