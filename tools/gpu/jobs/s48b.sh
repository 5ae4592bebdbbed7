# Queue job (tools/gpu/queue.sh), session 48: a guided regex and a schema string with a pattern
# through the CUDA executor's host-sampled rows: test_engine_gpu's JsonModeOnTheHostPath (JSON
# mode, a schema, a regex row, a pattern row; CPU and GPU engines) on the four tiny models,
# then the whole suite. test_engine_gpu links ICU: the call carries .gpulibx:
#   ninja -C build/cuda test_engine_gpu
#   tools/gpu/make_job.sh s48b tools/gpu/jobs/s48b.sh 150 test_engine_gpu=build/cuda/tests/unit/engine/test_engine_gpu
#   run(command="QUEUE_BUDGET=160 JOBS='s48b' tools/gpu/queue.sh >/dev/null 2>&1; tar -xzf $OUT/s48b.tgz
#       -C $OUT; cat $OUT/s48b/log.txt", carry=[".gpulib", ".gpulibx", ".gpuq/s48b"])
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
echo "== test_engine_gpu, JSON mode, a schema, a regex, a pattern"
timeout 90 "$BIN/test_engine_gpu" --gtest_filter='*JsonMode*' 2>&1 |
  command grep -E '^\[ +(OK|FAILED|PASSED) |Failure|Expected|Which is|JSON mode request|trace|row' | command tail -40
echo "== test_engine_gpu, all"
AB_TEST_TIMEOUT=70 ab_tests test_engine_gpu '*'
