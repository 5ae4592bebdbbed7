# Queue job (tools/gpu/queue.sh), session 42: the fused decode attention alone (fattn_gpu_check
# --bench --fused) at Qwen3-30B-A3B's geometry (32 query heads over 4 kv heads, d 128, bf16
# cache, batch 1) from 1K to 16K keys, under the default plans (one cluster a kv head to 8K,
# the counter form of <= 32 splits to 14336, streaming past; the "@32K" rows replay a 32K plan:
# streaming at every length) and with the streaming kernel from 2048 keys
# (PG_DSTREAM_FUSED_MIN_KEYS=2048). Question: does the kernel alone read its KV near the HBM
# rate at 4K-12K (the step's excess over its floor grows ~1 µs a layer per 1K keys there), or
# is the slowness the step's (the o projection's ring fill beside it)?
# Make it at HEAD:
#   ninja -C build/cuda fattn_gpu_check
#   tools/gpu/make_job.sh s42b tools/gpu/jobs/s42b.sh 300 fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ctx=1024,2048,4096,6144,8192,10240,12288,16384
echo "== defaults"
"$BIN/fattn_gpu_check" --bench --bf16 --batches=1 --kv-heads=4 --fused --contexts=$ctx 2>&1 | tail -n +1
echo "== streaming from 2048 keys"
PG_DSTREAM_FUSED_MIN_KEYS=2048 "$BIN/fattn_gpu_check" --bench --bf16 --batches=1 --kv-heads=4 --fused \
  --contexts=4096,8192,12288 2>&1 | command grep -E "fused|^bf16"
echo "== Llama geometry (8 kv heads) for reference"
"$BIN/fattn_gpu_check" --bench --bf16 --batches=1 --fused --contexts=4096,8192,16384 2>&1 | command grep -E "fused|^bf16"
