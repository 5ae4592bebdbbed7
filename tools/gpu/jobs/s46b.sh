# Queue job (tools/gpu/queue.sh), session 46: JSON mode (response_format json_object) through the
# CUDA executor's host-sampled rows, test_engine_gpu's JsonModeOnTheHostPath on the four tiny
# models (outputs valid or a valid prefix; CPU / GPU agreement printed), then the whole suite.
# test_engine_gpu links ICU: the call carries .gpulibx (queue.sh --pack-lib), and the 64 MiB
# carry leaves room for this one binary only (the tree ~33 MB, .gpulib 11, .gpulibx 8):
#   ninja -C build/cuda test_engine_gpu
#   tools/gpu/make_job.sh s46b tools/gpu/jobs/s46b.sh 120 test_engine_gpu=build/cuda/tests/unit/engine/test_engine_gpu
#   run(command="QUEUE_BUDGET=110 JOBS='s46b' tools/gpu/queue.sh >/dev/null 2>&1; tar -xzf $OUT/s46b.tgz
#       -C $OUT; cat $OUT/s46b/log.txt", carry=[".gpulib", ".gpulibx", ".gpuq/s46b"])
# Session 46 ran these two commands by hand (binaries of c506daf, H100): 4/4, then 24/24.
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
echo "== test_engine_gpu, JSON mode"
timeout 50 "$BIN/test_engine_gpu" --gtest_filter='*JsonMode*' 2>&1 |
  command grep -E '^\[ +(OK|FAILED|PASSED) |Failure|Expected|Which is|JSON mode request|trace' | command tail -40
echo "== test_engine_gpu, all"
AB_TEST_TIMEOUT=60 ab_tests test_engine_gpu '*'
