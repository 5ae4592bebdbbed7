# Queue job (tools/gpu/queue.sh), session 32: where a Qwen3-30B-A3B layer's time goes on the H100
# (block traces of one batch-1 x 1K step, the -DPEREGRINE_BLOCK_TRACE=ON build of the same tree;
# tools/gpu/block_timeline.py), gate/up at 4 and at 8 warps; then the walk-warps default's
# check (auto = 8 at one token) against 4 with the normal build, three rounds, the GPU MoE
# tests, and the MoE rows of the headline.
# Make it: ninja -C build/trace moe_gpu_check && ninja -C build/cuda moe_gpu_check
#   tools/gpu/make_job.sh h1t tools/gpu/jobs/h1t.sh 400 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     trace_moe_gpu_check=build/trace/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
echo "binaries of: $(cat "$JOB/commit" 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== tests"
ab_tests moe_gpu_check 'MoeExpertsOp.*:MoeRouterOp.*:GpuModelGolden.Tiny*'
for r in 1 2 3; do
  ab_step "auto" moe_gpu_check qwen3-30b-a3b
  ab_step "w4" moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_WALK_WARPS=4
  ab_step "v-auto" moe_gpu_check deepseek-v2-lite
  ab_step "v-w4" moe_gpu_check deepseek-v2-lite PEREGRINE_MOE_WALK_WARPS=4
done
AB_TRACE_LAUNCHES=1 ab_trace t-auto trace_moe_gpu_check qwen3-30b-a3b
AB_TRACE_LAUNCHES=1 ab_trace t-w4 trace_moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_WALK_WARPS=4
# Issue 7's headline rows (tools/gpu/headline.sh's MoE part) with this tree's defaults.
mkdir -p /tmp/dsv3_5l
python3 -c 'import json; c=json.load(open("configs/deepseek-v3/config.json")); c["num_hidden_layers"]=5; json.dump(c, open("/tmp/dsv3_5l/config.json","w"))'
hl() {  # label config batches
  echo "--- $1"
  timeout 60 "$BIN/moe_gpu_check" bench gpu-decode --load-format dummy --iters 20 --model "$2" --batch "$3" \
    --context 1024 2>&1 | tr '\r' '\n' | grep -E "^ +[0-9]+ +1024 |HBM" | awk '!seen[$0]++'
}
hl qwen3moe configs/qwen3-30b-a3b/config.json 1,2,4,8,32
hl v2lite configs/deepseek-v2-lite/config.json 1,8,32
hl dsv3_5l /tmp/dsv3_5l/config.json 1,8,32
