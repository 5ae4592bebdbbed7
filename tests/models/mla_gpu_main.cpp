// mla_gpu_check: everything one MLA GPU job runs, in one binary (the job folder's size limit):
//   mla_gpu_check [gtest flags]            the MLA op harness (tests/ops/mla_ops_test.cpp) and
//                                          the device model goldens (gpu_model_test.cpp)
//   mla_gpu_check --bench-mla [--quick]    tests/ops/bench_mla.cpp
//   mla_gpu_check bench gpu-decode ...     `peregrine bench gpu-decode` (src/cli/cmd_bench_gpu.cpp)
#include <CLI/CLI.hpp>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "cli/commands.h"
#include "core/log.h"
#include "core/status.h"

namespace pg::bench {
int RunMlaBench(int argc, char** argv);
}

namespace {

int RunCli(int argc, char** argv) {
  CLI::App app{"mla_gpu_check (GPU benchmarks)"};
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
    std::fprintf(stderr, "mla_gpu_check: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--bench-mla") == 0)
    return pg::bench::RunMlaBench(argc - 1, argv + 1);
  if (argc > 1 && std::strcmp(argv[1], "bench") == 0) return RunCli(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
