# Queue job (tools/gpu/queue.sh), session 41: knob probe of the fused attention's in-loop L2
# prefetch (PG_DECODE_L2_PREFETCH=n: each warp also prefetches the K / V rows of its tile n
# ahead of the ring into L2; n = 1, 2) on the cluster plan's two-stage loop form (one cluster a kv head at
# 4K / 8K) and on its counter form (12K), Qwen3-30B-A3B, graph captured at the context, two
# rounds interleaved. No code change: binaries of the counter form's commit.
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check
#   tools/gpu/make_job.sh s41c tools/gpu/jobs/s41c.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
m=qwen3-30b-a3b
ab_step warmup moe_gpu_check $m
for r in 1 2; do
  for c in 4096 8192 12288; do
    export AB_CONTEXT=$c
    ab_step "base-c$c" moe_gpu_check $m
    for n in 1 2; do ab_step "pf$n-c$c" moe_gpu_check $m PG_DECODE_L2_PREFETCH=$n; done
  done
  unset AB_CONTEXT
done
