# Queue job (tools/gpu/queue.sh): the headline of issues 6 + 7 (tools/gpu/headline.sh; the
# PyTorch peer with HL_TORCH=1) from main's binaries. The device call's environment passes through to every
# binary, so a switch that won its A/B can be in the headline before its default flips, e.g.
#   run(command="PEREGRINE_MOE_L2_AFTER_PCT=12 QUEUE_BUDGET=590 JOBS=hl tools/gpu/queue.sh >/dev/null 2>&1;
#     tar -xzf $OUT/hl.tgz -C $OUT; cat $OUT/hl/log.txt", carry=[".gpulib", ".gpuq/hl"])
# Make it (here, from the repo root, at the commit to measure):
#   ninja -C build/cuda gemv_gpu_check fattn_gpu_check moe_gpu_check
#   tools/gpu/make_job.sh hl tools/gpu/jobs/hl.sh 580 gemv_gpu_check=build/cuda/tests/models/gemv_gpu_check \
#     fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
env | grep -E '^(PEREGRINE|PG)_' | sort | sed 's/^/switch: /'
echo "binaries of: $(cat "$JOB/commit" 2>/dev/null)"
# HL_TORCH=1: with the PyTorch peer (tools/gpu/headline.sh, ~250 s more).
if [[ -n "${HL_TORCH:-}" ]]; then OUT="$OUT/hl" bash tools/gpu/headline.sh
else SKIP_TORCH=1 OUT="$OUT/hl" bash tools/gpu/headline.sh; fi
