# Queue job (tools/gpu/queue.sh), session 46: JSON mode (response_format json_object) through the
# CUDA executor's host-sampled rows, test_engine_gpu's JsonModeOnTheHostPath on the four tiny
# models (outputs valid or a valid prefix; CPU / GPU agreement printed), beside main's H200
# headline binary (tools/gpu/if_h200_headline.sh runs it first on an H200 only).
#   ninja -C build/cuda moe_gpu_check test_engine_gpu
#   tools/gpu/make_job.sh s46b tools/gpu/jobs/s46b.sh 120 moe_gpu_check=build/cuda/tests/models/moe_gpu_check \
#     test_engine_gpu=build/cuda/tests/unit/engine/test_engine_gpu
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
echo "== test_engine_gpu, JSON mode"
timeout 110 "$BIN/test_engine_gpu" --gtest_filter='*JsonMode*' 2>&1 |
  command grep -E '^\[ +(OK|FAILED|PASSED) |Failure|Expected|Which is|JSON mode request|trace' | command tail -40
