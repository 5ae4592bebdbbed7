# Queue job (tools/gpu/queue.sh), session 47: logit_bias and JSON schemas (structured outputs)
# through the CUDA executor's host-sampled rows: test_engine_gpu's LogitBiasOnTheHostPath and
# JsonModeOnTheHostPath (with its schema row) on the four tiny models, then the whole suite.
# test_engine_gpu links ICU: the call carries .gpulibx (queue.sh --pack-lib):
#   ninja -C build/cuda test_engine_gpu
#   tools/gpu/make_job.sh s47a tools/gpu/jobs/s47a.sh 150 test_engine_gpu=build/cuda/tests/unit/engine/test_engine_gpu
#   run(command="QUEUE_BUDGET=140 JOBS='s47a' tools/gpu/queue.sh >/dev/null 2>&1; tar -xzf $OUT/s47a.tgz
#       -C $OUT; cat $OUT/s47a/log.txt", carry=[".gpulib", ".gpulibx", ".gpuq/s47a"])
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
echo "== test_engine_gpu, logit_bias, JSON mode and a schema"
timeout 60 "$BIN/test_engine_gpu" --gtest_filter='*LogitBias*:*JsonMode*' 2>&1 |
  command grep -E '^\[ +(OK|FAILED|PASSED) |Failure|Expected|Which is|JSON mode request|trace|schema row' | command tail -40
echo "== test_engine_gpu, all"
AB_TEST_TIMEOUT=70 ab_tests test_engine_gpu '*'
