// mega_gpu_check: everything one persistent-decode-kernel GPU job (issue 6) runs, in one binary:
//   mega_gpu_check [gtest flags]          MegaPlan against the CUDA composition (bitwise) and the
//                                         CPU reference (tests/ops/mega_test.cpp), and the device
//                                         model goldens (gpu_model_test.cpp; PEREGRINE_MEGA=1
//                                         runs them through the mega path)
//   mega_gpu_check --bench-mega           tests/ops/bench_mega.cpp (projection stack vs floor)
//   mega_gpu_check bench gpu-decode ...   `peregrine bench gpu-decode` (src/cli/cmd_bench_gpu.cpp)
#include "gpu_check_main.h"

namespace pg::bench {
int RunMegaBench();
}

int main(int argc, char** argv) {
  return pg::testing_gpu::GpuCheckMain(argc, argv, "mega_gpu_check", "--bench-mega",
                                       [](int, char**) { return pg::bench::RunMegaBench(); });
}
