// gemv_gpu_check: everything one dense-decode GPU job (issue 6, helper "gemv") runs, in one
// binary (the job folder's size limit):
//   gemv_gpu_check [gtest flags]          the op harness of FusedMatmul, Matmul and the
//                                         row-wise ops (tests/ops) and the device model
//                                         goldens / fp8-weight check (gpu_*_test.cpp)
//   gemv_gpu_check --bench-gemv           tests/ops/bench_gemv.cpp
//   gemv_gpu_check bench gpu-decode ...   `peregrine bench gpu-decode` (src/cli/cmd_bench_gpu.cpp)
#include <CLI/CLI.hpp>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "cli/commands.h"

namespace pg::bench {
int RunGemvBench();
}

namespace {

int RunCli(int argc, char** argv) {
  CLI::App app{"gemv_gpu_check (GPU benchmarks)"};
  app.require_subcommand(1);
  CLI::App* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  pg::cli::AddBenchGpuDecodeCommand(*bench);
  pg::cli::AddBenchGpuPrefillCommand(*bench);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemv_gpu_check: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--bench-gemv") == 0) return pg::bench::RunGemvBench();
  if (argc > 1 && std::strcmp(argv[1], "bench") == 0) return RunCli(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
