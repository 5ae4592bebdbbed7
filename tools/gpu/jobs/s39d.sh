# Queue job (tools/gpu/queue.sh), session 39: the cluster plan's grid above 1K keys
# (decode_fused_plan.cu ClusterFit, PG_FUSED_CLUSTER_FIT: 0 = 64-key splits at the plan's length,
# 32 a kv head at 2K merged through the counter; 1 = at most 16 splits, one cluster a kv head;
# 2 = 1 plus two ring stages and the exchange form where a split holds <= 128 keys). s39a: Qwen3-30B-A3B
# 1 x 1K 2919 us with its graph captured at 1K, 3216 in the engine's 2048-key graph set, 3225 at
# exactly 2K. Then: the fused attention's tests under each mode; the headline rows of HEAD (no
# Llama control: two binaries fit a call); every moe_gpu_check test; the sweep of Qwen3's
# attention plans at 3K-32K (session 39's unrun s39b / s39c, folded in here).
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check fattn_gpu_check
#   tools/gpu/make_job.sh s39d tools/gpu/jobs/s39d.sh 580 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ab_hbm
echo "== fused attention tests by PG_FUSED_CLUSTER_FIT"
for f in 0 1 2; do
  echo "fit $f"; AB_TEST_TIMEOUT=150 ab_tests fattn_gpu_check 'RopeKvWriteAttention.*' PG_FUSED_CLUSTER_FIT=$f | tail -2
done
m=qwen3-30b-a3b
ab_step warmup moe_gpu_check $m
for r in 1 2 3; do
  for h in $m deepseek-v2-lite; do ab_step "head-$h" moe_gpu_check "$h"; done
  for f in 0 1 2; do AB_CONTEXT=2048 ab_step "fit$f-c2048" moe_gpu_check $m PG_FUSED_CLUSTER_FIT=$f; done
  AB_CONTEXT=2048 ab_step "msk128-c2048" moe_gpu_check $m PG_FUSED_MIN_SPLIT_KEYS=128
done
for f in 0 1 2; do
  AB_SERVE_CONTEXTS=1024,1536,2048,3072,4096 ab_serve "fit$f-$m" moe_gpu_check $m PG_FUSED_CLUSTER_FIT=$f
done
ab_batches base qwen3-30b-a3b 8,32
ab_batches base deepseek-v2-lite 8,32
ab_batches base moonlight-16b-a3b 1
echo "== moe tests"
AB_TEST_TIMEOUT=200 ab_tests moe_gpu_check '*' | tail -4
echo "== s39b sweep, one round"
for c in 3072 4096; do
  export AB_CONTEXT=$c
  ab_step "base-c$c" moe_gpu_check $m
  ab_step "msk256-c$c" moe_gpu_check $m PG_FUSED_MIN_SPLIT_KEYS=256
  ab_step "fit1-c$c" moe_gpu_check $m PG_FUSED_CLUSTER_FIT=1
  ab_step "noclu-c$c" moe_gpu_check $m PG_FUSED_CLUSTER_PLAN=0
  ab_step "stream-c$c" moe_gpu_check $m PG_DSTREAM_FUSED_MIN_KEYS=1024
done
for c in 6144 8192 12288; do
  export AB_CONTEXT=$c
  ab_step "base-c$c" moe_gpu_check $m
  ab_step "stream-c$c" moe_gpu_check $m PG_DSTREAM_FUSED_MIN_KEYS=4097
  ab_step "small0-c$c" moe_gpu_check $m PG_FUSED_SMALL=0
  ab_step "msk128-c$c" moe_gpu_check $m PG_FUSED_MIN_SPLIT_KEYS=128
done
for c in 16384 32768; do
  export AB_CONTEXT=$c
  ab_step "base-c$c" moe_gpu_check $m
  ab_step "fused-c$c" moe_gpu_check $m PG_DSTREAM_FUSED_MIN_KEYS=0
done
unset AB_CONTEXT
for c in 2048 4096 8192 12288; do
  PG_FUSED_SMALL_LOG=1 timeout 60 "$BIN/moe_gpu_check" bench gpu-decode --load-format dummy --iters 3 \
    --batch 1 --context $c --model configs/$m/config.json 2>&1 | command grep -m2 -E 'fused attention|stream'
done
