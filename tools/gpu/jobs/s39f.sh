# Queue job (tools/gpu/queue.sh), session 39, not yet run: the streaming decode kernel's split size
# where one sequence now takes it from 4097 keys (HEAD's default). Its plan splits at >= 64 keys
# (PG_DSTREAM_MIN_SPLIT_KEYS) to fill the SMs: ~132 splits of 46-93 keys at 6K-12K, then the
# combine kernel merges them. s39d (H100): Qwen3-30B-A3B on it 64.4 / 64.8 / 65.2 % of the floor at
# 6K / 8K / 12K against 73.3 % at 32K; Llama-3.1-8B 94.2-94.6 %. Rows: graph at the exact context,
# two rounds, PG_DSTREAM_MIN_SPLIT_KEYS 64 (base) / 128 / 256 / 512, Qwen3 and Llama, 6K-32K; and
# Qwen3 at 3K / 4K, the cluster plan (default) against the streaming kernel at 64 / 256 / 512.
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check
#   tools/gpu/make_job.sh s39f tools/gpu/jobs/s39f.sh 450 moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ab_step warmup moe_gpu_check qwen3-30b-a3b
for r in 1 2; do
  for m in qwen3-30b-a3b llama-3.1-8b; do
    for c in 6144 8192 12288 16384 32768; do
      export AB_CONTEXT=$c
      ab_step "base-$m-c$c" moe_gpu_check $m
      for k in 128 256 512; do ab_step "msk$k-$m-c$c" moe_gpu_check $m PG_DSTREAM_MIN_SPLIT_KEYS=$k; done
    done
  done
  # 3K / 4K: the cluster plan (default) against the streaming kernel with longer splits
  for c in 3072 4096; do
    export AB_CONTEXT=$c
    ab_step "base-qwen3-30b-a3b-c$c" moe_gpu_check qwen3-30b-a3b
    for k in 64 256 512; do
      ab_step "stream$k-qwen3-30b-a3b-c$c" moe_gpu_check qwen3-30b-a3b PG_DSTREAM_FUSED_MIN_KEYS=2048 PG_DSTREAM_MIN_SPLIT_KEYS=$k
    done
  done
  unset AB_CONTEXT
done
