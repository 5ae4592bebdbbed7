# Queue job (tools/gpu/queue.sh), session 36's headline rows at HEAD (the qkv fill pacing of
# 7c4c961 the only source change of the session on main), on whatever card the call gets
# (asked as nvidia-h200: issue 7's goal is the H200's): batch 1 x 1K three rounds, batches 8 / 32,
# Moonlight, Llama-3.1-8B as a control. The bench's own HBM line gives the floor's rate.
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check gemv_gpu_check
#   tools/gpu/make_job.sh s36k tools/gpu/jobs/s36k.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     gemv_gpu_check=build/cuda/tests/models/gemv_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ab_hbm
for r in 1 2 3; do
  ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
  ab_step base-deepseek-v2-lite moe_gpu_check deepseek-v2-lite
done
ab_headline_rest
