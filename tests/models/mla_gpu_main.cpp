// mla_gpu_check: everything one MLA GPU job runs, in one binary:
//   mla_gpu_check [gtest flags]            the MLA op harness (tests/ops/mla_ops_test.cpp) and
//                                          the device model goldens (gpu_model_test.cpp)
//   mla_gpu_check --bench-mla [--quick]    tests/ops/bench_mla.cpp
//   mla_gpu_check bench gpu-decode ...     `peregrine bench gpu-decode` (src/cli/cmd_bench_gpu.cpp)
#include "gpu_check_main.h"

namespace pg::bench {
int RunMlaBench(int argc, char** argv);
}

int main(int argc, char** argv) {
  return pg::testing_gpu::GpuCheckMain(argc, argv, "mla_gpu_check", "--bench-mla",
                                       pg::bench::RunMlaBench);
}
