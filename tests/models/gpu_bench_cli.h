// The `bench gpu-decode` / `bench gpu-prefill` command line of the lean GPU binaries
// (peregrine_gpu_bench and the *_gpu_check job binaries): the same command code as the full
// CLI (src/cli/cmd_bench_gpu.cpp) without the server/tokenizer/engine libraries, so a GPU job
// carries a small binary. argv as for `peregrine bench gpu-decode ...`.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "core/log.h"
#include "core/status.h"

namespace pg::testing_gpu {

// Parses and runs the command; returns the process exit code (1: pg::Error, 2: anything else).
inline int RunGpuBenchCli(const char* name, int argc, char** argv) {
  CLI::App app{std::string(name) + " (GPU benchmarks)"};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off");
  app.parse_complete_callback([&] { pg::SetLogLevel(log_level); });
  CLI::App* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  pg::cli::AddBenchGpuDecodeCommand(*bench);
  pg::cli::AddBenchGpuPrefillCommand(*bench);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const pg::Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: unexpected error: %s\n", name, e.what());
    return 2;
  }
  return 0;
}

}  // namespace pg::testing_gpu
