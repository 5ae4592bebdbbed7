# Queue job (tools/gpu/queue.sh), session 40: block traces of Qwen3-30B-A3B's batch-1 step at
# 1K / 4K (the fused kernel's cluster plan) and 6K / 8K (the streaming kernel + combine), with
# two middle layers' launches: where a layer's attention spends the time its KV bytes do not
# account for at 3K-12K keys (63-67 % of the floor against 70 % at 1K and 73 % at 32K).
# Make it at HEAD:
#   ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh s40a tools/gpu/jobs/s40a.sh 200 moe_trace=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
for c in 1024 4096 6144 8192; do
  AB_CONTEXT=$c AB_TRACE_LAUNCHES=1 AB_TRACE_PHASES=120 ab_trace "c$c" moe_trace qwen3-30b-a3b
done
