// The device sampling / fp8 Matmul benchmark (bench_sample_lib.cpp). Prints its tables;
// returns 0, or 1 after printing the error.
#pragma once

namespace pg::bench {
int RunSampleBench();
}  // namespace pg::bench
