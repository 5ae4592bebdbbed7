# Queue job (tools/gpu/queue.sh), session 39: the headline of HEAD (issue 7: batch 1 x 1K rows, three
# rounds; batches 8 / 32, Moonlight, Llama-3.1-8B as control; every moe_gpu_check test), then s39b's
# sweep of Qwen3-30B-A3B's decode attention plans from 2K to
# 32K keys (s39a: graphs captured at the exact context read 1K 2919, 2K 3225, 3K 3349, 4K 3414,
# 12K 4004, 16K 3783, 32K 4212 us a step on the H100; 2K-12K at 60-65 % of the floor against
# 70-73 % at 1K and 32K). One process a row (graph captured at the row's context), two rounds,
# the plan's knobs: PG_FUSED_MIN_SPLIT_KEYS (the cluster plan's split keys), PG_FUSED_CLUSTER_PLAN=0,
# PG_DSTREAM_FUSED_MIN_KEYS (where the streaming kernel takes over from the fused one), PG_FUSED_SMALL.
# The plans' log lines (PG_FUSED_SMALL_LOG=1) of the base first.
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check gemv_gpu_check
#   tools/gpu/make_job.sh s39c tools/gpu/jobs/s39c.sh 580 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     gemv_gpu_check=build/cuda/tests/models/gemv_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ab_hbm
ab_step warmup moe_gpu_check qwen3-30b-a3b
for r in 1 2 3; do
  for m in qwen3-30b-a3b deepseek-v2-lite; do ab_step "head-$m" moe_gpu_check "$m"; done
done
ab_headline_rest
echo "== tests"
AB_TEST_TIMEOUT=200 ab_tests moe_gpu_check '*' | tail -4
echo "== s39b"
m=qwen3-30b-a3b
for c in 2048 4096 8192 12288; do
  PG_FUSED_SMALL_LOG=1 timeout 60 "$BIN/moe_gpu_check" bench gpu-decode --load-format dummy --iters 3 \
    --batch 1 --context $c --model configs/$m/config.json 2>&1 | command grep -m2 -E 'fused attention|stream'
done
ab_step warmup moe_gpu_check $m
for r in 1 2; do
  for c in 2048 3072 4096; do
    export AB_CONTEXT=$c
    ab_step "base-c$c" moe_gpu_check $m
    ab_step "msk128-c$c" moe_gpu_check $m PG_FUSED_MIN_SPLIT_KEYS=128
    ab_step "msk256-c$c" moe_gpu_check $m PG_FUSED_MIN_SPLIT_KEYS=256
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
done
