# Queue job (tools/gpu/queue.sh): Llama-3.1-8B batch-1 rows at 1K and 32K from main's gemv binary
# (issue 6's goal rows), three rounds at --iters 50, to confirm a headline on the same machine.
# Make it: mkdir -p .gpuq/confirm/bin && cp .gpuq/hl/bin/gemv_gpu_check.xz .gpuq/confirm/bin/ &&
#   cp tools/gpu/jobs/confirm.sh .gpuq/confirm/run.sh && echo 200 > .gpuq/confirm/timeout && date > .gpuq/confirm/READY
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "binaries of: $(cat "$JOB/commit" 2>/dev/null)"
export AB_TIMEOUT=90
for r in 1 2 3; do
  AB_CONTEXT=1024 ab_step "1k-llama-3.1-8b" gemv_gpu_check llama-3.1-8b
  AB_CONTEXT=32768 ab_step "32k-llama-3.1-8b" gemv_gpu_check llama-3.1-8b
done
