# Queue job (tools/gpu/queue.sh), session 49: test_engine_gpu on main's binaries:
# JsonModeOnTheHostPath (JSON mode, a schema, a regex row, a pattern row, a grammar row; CPU and GPU engines) on
# the four tiny models, then the whole suite. test_engine_gpu links ICU: the call carries
# .gpulibx (with moe_gpu_check beside it the carry passes 64 MiB, so the H200 headline check
# runs in its own call, s46a):
#   ninja -C build/cuda test_engine_gpu
#   tools/gpu/make_job.sh s49a tools/gpu/jobs/s49a.sh 300 test_engine_gpu=build/cuda/tests/unit/engine/test_engine_gpu
#   run(command="QUEUE_BUDGET=320 JOBS='s49a' tools/gpu/queue.sh >/dev/null 2>&1;
#       tar -xzf $OUT/s49a.tgz -C $OUT; cat $OUT/s49a/log.txt",
#       carry=[".gpulib", ".gpulibx", ".gpuq/s49a"])
source tools/gpu/queue_env.sh
source tools/gpu/ab_rows.sh
ab_header
echo "== test_engine_gpu, JSON mode, a schema, a regex, a pattern"
timeout 90 "$BIN/test_engine_gpu" --gtest_filter='*JsonMode*' 2>&1 |
  command grep -E '^\[ +(OK|FAILED|PASSED) |Failure|Expected|Which is|JSON mode request|JSON request|engine, reason|not finite|trace|row' | command tail -40
echo "== test_engine_gpu, all"
AB_TEST_TIMEOUT=70 ab_tests test_engine_gpu '*'
