# Queue job (tools/gpu/queue.sh), session 31: the exchange form's new default (PG_FUSED_XW
# unset = -1: the asynchronous form on the cluster plan only). The attention harness (run 12
# checks where the default takes it) and the goldens, then batch-1 x 1K step rows with the
# default against PG_FUSED_XW=0 for Qwen3-30B-A3B (cluster plan) and Llama-3.1-8B (two-tile
# plan, where the default must not change anything), three interleaved rounds, and one
# gpu-decode sweep of Qwen3 at batch 1 / 8 / 32 each way.
# Make it: cmake --build build/cuda -j2 --target fattn_gpu_check moe_gpu_check
#   tools/gpu/make_job.sh xd tools/gpu/jobs/xd.sh 560 fattn_gpu_check=build/cuda/tests/models/fattn_gpu_check \
#     moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "binaries of: $(cat "$JOB/commit" 2>/dev/null)"
echo "== tests"
ab_tests fattn_gpu_check 'RopeKvWriteAttention.*:GpuModelGolden.Tiny*:GpuRunner.*'
ab_tests moe_gpu_check 'MoeExpertsOp.*:GpuModelGolden.Tiny*'
echo "== step rows, batch 1 x 1K"
for r in 1 2 3; do
  ab_step "default-qwen3" moe_gpu_check qwen3-30b-a3b
  ab_step "xw0-qwen3" moe_gpu_check qwen3-30b-a3b PG_FUSED_XW=0
  ab_step "default-llama" fattn_gpu_check llama-3.1-8b
  ab_step "xw0-llama" fattn_gpu_check llama-3.1-8b PG_FUSED_XW=0
done
for x in default 0; do
  echo "== qwen3 sweep, PG_FUSED_XW=$x"
  env $([[ $x == 0 ]] && echo PG_FUSED_XW=0) timeout 60 "$BIN/moe_gpu_check" bench gpu-decode --load-format dummy \
    --iters 20 --batch 1,8,32 --context 1024,4096 --model configs/qwen3-30b-a3b/config.json 2>&1 |
    tr '\r' '\n' | grep -E "^ +(1|8|32) +(1024|4096) "
done
