# Queue job (tools/gpu/queue.sh), session 38: HEAD with the flat gate/up grid's weight loads not
# allocated in L1 (moe_walk.cu LoadNoL1; s38n, s38o on the branch: DeepSeek-V2-Lite -10.3 / -10.8,
# Moonlight -7.4 us a step; the per-slot grid keeps __ldcs) against moe_main (049e29b), two
# rounds after a warm-up; then every moe_gpu_check test on HEAD.
# Queued at the end of session 38 (no device time left); run it first in the next session.
# Make it (moe_main: 049e29b's binary, built aside first):
#   git checkout 049e29b && ninja -C build/cuda moe_gpu_check && mkdir -p /tmp/nb && cp build/cuda/tests/models/moe_gpu_check /tmp/nb/moe_main
#   git checkout main && ninja -C build/cuda moe_gpu_check
#   tools/gpu/make_job.sh s38p tools/gpu/jobs/s38p.sh 200 moe_gpu_check=build/cuda/tests/models/moe_gpu_check moe_main=/tmp/nb/moe_main
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
ab_step warmup moe_main deepseek-v2-lite
for r in 1 2; do
  for m in deepseek-v2-lite moonlight-16b-a3b qwen3-30b-a3b; do
    ab_step "main-$m" moe_main "$m"
    ab_step "head-$m" moe_gpu_check "$m"
  done
done
echo "== tests"
AB_TEST_TIMEOUT=150 ab_tests moe_gpu_check '*' | tail -4
