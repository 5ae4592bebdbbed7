// gemv_gpu_check: everything one dense-decode GPU job (issue 6) runs, in one binary:
//   gemv_gpu_check [gtest flags]          the op harness of FusedMatmul, Matmul and the
//                                         row-wise ops (tests/ops) and the device model
//                                         goldens / fp8-weight check (gpu_*_test.cpp)
//   gemv_gpu_check --bench-gemv           tests/ops/bench_gemv.cpp
//   gemv_gpu_check bench gpu-decode ...   `peregrine bench gpu-decode` (src/cli/cmd_bench_gpu.cpp)
#include "gpu_check_main.h"

namespace pg::bench {
int RunGemvBench();
}

int main(int argc, char** argv) {
  return pg::testing_gpu::GpuCheckMain(argc, argv, "gemv_gpu_check", "--bench-gemv",
                                       [](int, char**) { return pg::bench::RunGemvBench(); });
}
