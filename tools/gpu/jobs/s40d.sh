# Queue job (tools/gpu/queue.sh), session 40: block traces of b8c660f's defaults (the cluster
# plan at two ring stages past 2K keys, and to 8K keys for one sequence), Qwen3-30B-A3B's batch-1
# step at 4K and 8K (cluster plan) and 12K (streaming), with two middle layers' launches and the
# phases: what the attention still spends past its bytes at 3K-12K.
# Make it at HEAD:
#   ninja -C build/trace moe_gpu_check
#   tools/gpu/make_job.sh s40d tools/gpu/jobs/s40d.sh 200 moe_trace=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
for c in 4096 8192 12288; do
  AB_CONTEXT=$c AB_TRACE_LAUNCHES=1 AB_TRACE_PHASES=120 ab_trace "c$c" moe_trace qwen3-30b-a3b
done
