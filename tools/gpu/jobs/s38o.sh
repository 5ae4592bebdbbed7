# Queue job (tools/gpu/queue.sh), session 38: s38n again (the same machine, still warm; the gate/up weight
# loads not allocated in L1, branch s38/gu-noalloc; s38n: DeepSeek-V2-Lite -10.3 us a step,
# Qwen3-30B-A3B +1.2), with Moonlight and DeepSeek-V3's fp8 shape (5 layers).
# Make it: as s38n (tools/gpu/make_job.sh s38o tools/gpu/jobs/s38o.sh 240 moe_main=/tmp/nb/moe_main
#   moe_noalloc=/tmp/nb/moe_noalloc).
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ab_step warmup moe_main deepseek-v2-lite
for r in 1 2 3; do
  for m in deepseek-v2-lite moonlight-16b-a3b qwen3-30b-a3b; do
    ab_step "main-$m" moe_main "$m"
    ab_step "noalloc-$m" moe_noalloc "$m"
  done
done
for r in 1 2; do
  AB_BIN=moe_main ab_batches main dsv3_5l 1
  AB_BIN=moe_noalloc ab_batches noalloc dsv3_5l 1
done
