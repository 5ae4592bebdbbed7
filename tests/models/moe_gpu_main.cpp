// moe_gpu_check: the MoE GPU evidence in one binary (a GPU job carries one binary: the CUDA
// kernels are most of each binary's size):
//   moe_gpu_check [gtest flags]              the MoE op harness (moe_ops_test.cpp) and the GPU
//                                            model goldens / runner tests (gpu_model_test.cpp)
//   moe_gpu_check --bench-moe [args]         the MoE layer benchmark (bench_moe.cpp)
//   moe_gpu_check bench gpu-decode [args]    as `peregrine bench gpu-decode` (cmd_bench_gpu.cpp)
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>

#include "cli/commands.h"
#include "core/status.h"

namespace pg::bench {
int RunMoeBench(int argc, char** argv);
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--bench-moe") == 0)
    return pg::bench::RunMoeBench(argc - 1, argv + 1);
  if (argc > 1 && std::strcmp(argv[1], "bench") == 0) {
    CLI::App app{"moe_gpu_check bench"};
    app.require_subcommand(1);
    CLI::App* bench = app.add_subcommand("bench", "benchmarks");
    bench->require_subcommand(1);
    pg::cli::AddBenchGpuDecodeCommand(*bench);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "moe_gpu_check: error: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
