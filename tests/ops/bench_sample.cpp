// bench_sample: device sampling and fp8 Matmul on the H200 (bench_sample_lib.cpp); no arguments.
#include "bench_sample.h"

int main() { return pg::bench::RunSampleBench(); }
