// A lean `peregrine` for the GPU machine: only `bench gpu-decode` and `bench gpu-prefill`, the same command code as
// the full CLI (src/cli/cmd_bench_gpu.cpp) without the server/tokenizer/engine libraries, so
// tools/gpu/model_check.sh carries a small binary. Usage as `peregrine bench gpu-decode ...`.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "core/log.h"
#include "core/status.h"

int main(int argc, char** argv) {
  CLI::App app{"peregrine (GPU benchmarks only)"};
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
    std::fprintf(stderr, "peregrine: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "peregrine: unexpected error: %s\n", e.what());
    return 2;
  }
  return 0;
}
