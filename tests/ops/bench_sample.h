// The device sampling / fp8 Matmul benchmark (bench_sample_lib.cpp). Prints its tables;
// returns 0, or 1 after printing the error. sampling_only: the sampling tables alone.
#pragma once

namespace pg::bench {
int RunSampleBench(bool sampling_only = false);
}  // namespace pg::bench
