# Queue job (tools/gpu/queue.sh), session 37: s37b's one win, the gate/up kernel at 4 loads in
# flight (PEREGRINE_MOE_GU_UNROLL=4) on DeepSeek-V2-Lite (-23 us against a base that ran first
# in its round), checked in interleaved rounds after a warm-up step, on the models whose one-token
# bf16 gate/up takes the flat grid (DeepSeek-V2-Lite, Moonlight, DeepSeek-V3's shape cut to 5
# layers with bf16 experts), against the same 2 blocks an SM at 2 loads (GU_FLAT_SM=2: is it the
# loads or the wave?); Qwen3-30B-A3B's per-slot grid at 4 loads (GU_FLAT=0) and 2 / 8 tokens.
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check
#   tools/gpu/make_job.sh s37c tools/gpu/jobs/s37c.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
mkdir -p configs/dsv3bf16-5l
python3 -c 'import json; c = json.load(open("configs/deepseek-v3/config.json")); c["num_hidden_layers"] = 5; c.pop("quantization_config", None); json.dump(c, open("configs/dsv3bf16-5l/config.json", "w"))'
ab_step warmup moe_gpu_check deepseek-v2-lite
for r in 1 2 3; do
  for m in deepseek-v2-lite moonlight-16b-a3b dsv3bf16-5l; do
    ab_step "base-$m" moe_gpu_check "$m"
    ab_step "gu4-$m" moe_gpu_check "$m" PEREGRINE_MOE_GU_UNROLL=4
    ab_step "sm2-$m" moe_gpu_check "$m" PEREGRINE_MOE_GU_FLAT_SM=2
  done
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step gu4slot-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b PEREGRINE_MOE_GU_UNROLL=4 PEREGRINE_MOE_GU_FLAT=0
done
ab_batches base deepseek-v2-lite 2,4,8
ab_batches gu4 deepseek-v2-lite 2,4,8 PEREGRINE_MOE_GU_UNROLL=4
ab_batches base moonlight-16b-a3b 2,4
ab_batches gu4 moonlight-16b-a3b 2,4 PEREGRINE_MOE_GU_UNROLL=4
