# Queue job (tools/gpu/queue.sh), session 36: the gate/up kernel routing for itself
# (PEREGRINE_MOE_GU_ROUTES=1, session 32 on the H100: +254 us a step) without the down kernel's
# preload (PEREGRINE_MOE_DOWN_PRELOAD=0): with both, each of the down kernel's 512 blocks
# routes the token again before its wait, and most of them start only as gate/up blocks leave
# (s36g's traces), so that routing sits on the critical path. Qwen3-30B-A3B and
# DeepSeek-V2-Lite 1 x 1K, two rounds.
# Make it at HEAD:
#   ninja -C build/cuda moe_gpu_check
#   tools/gpu/make_job.sh s36l tools/gpu/jobs/s36l.sh 300 moe_gpu_check=build/cuda/tests/models/moe_gpu_check
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
for r in 1 2; do
  for m in qwen3-30b-a3b deepseek-v2-lite; do
    ab_step base-$m moe_gpu_check $m
    ab_step gur-$m moe_gpu_check $m PEREGRINE_MOE_GU_ROUTES=1
    ab_step gurnp-$m moe_gpu_check $m PEREGRINE_MOE_GU_ROUTES=1 PEREGRINE_MOE_DOWN_PRELOAD=0
  done
done
