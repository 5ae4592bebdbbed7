// moe_gpu_check: the MoE GPU evidence in one binary:
//   moe_gpu_check [gtest flags]              the MoE op harness (moe_ops_test.cpp) and the GPU
//                                            model goldens / runner tests (gpu_model_test.cpp)
//   moe_gpu_check --bench-moe [args]         the MoE layer benchmark (bench_moe.cpp)
//   moe_gpu_check bench gpu-decode [args]    as `peregrine bench gpu-decode` (cmd_bench_gpu.cpp)
#include "gpu_check_main.h"

namespace pg::bench {
int RunMoeBench(int argc, char** argv);
}

int main(int argc, char** argv) {
  return pg::testing_gpu::GpuCheckMain(argc, argv, "moe_gpu_check", "--bench-moe",
                                       pg::bench::RunMoeBench);
}
