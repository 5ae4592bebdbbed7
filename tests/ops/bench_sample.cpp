// bench_sample: device sampling and fp8 Matmul on the H200 (bench_sample_lib.cpp);
// `bench_sample --sampling` runs the sampling tables only.
#include <cstring>

#include "bench_sample.h"

int main(int argc, char** argv) {
  return pg::bench::RunSampleBench(argc > 1 && std::strcmp(argv[1], "--sampling") == 0);
}
