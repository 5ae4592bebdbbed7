// The bench_sample benchmark inside test_ops (CUDA builds), so one binary carries the harness
// and the benchmark to the GPU machine: --gtest_also_run_disabled_tests
// --gtest_filter=BenchSample.DISABLED_Run (or DISABLED_SamplingOnly). Not a test (asserts only that it ran).
#include <gtest/gtest.h>

#include "bench_sample.h"

TEST(BenchSample, DISABLED_Run) { EXPECT_EQ(pg::bench::RunSampleBench(), 0); }
TEST(BenchSample, DISABLED_SamplingOnly) { EXPECT_EQ(pg::bench::RunSampleBench(true), 0); }
