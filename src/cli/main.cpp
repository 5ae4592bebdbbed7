// peregrine: the command-line entry point.
//   peregrine generate --model PATH|embedded --prompt TEXT [sampling flags]
//   peregrine chat     --model PATH|embedded
//   peregrine serve    --model PATH|embedded [--host H --port P ...]
//   peregrine bench decode | bench agentic ...
//   peregrine sim      (scheduler simulator)
#include <CLI/CLI.hpp>

#include <cstdio>

#include "bench/agentic.h"
#include "cli/commands.h"
#include "core/log.h"
#include "core/status.h"

int main(int argc, char** argv) {
  CLI::App app{"Peregrine: LLM inference and serving engine"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "peregrine 0.1.0");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off");
  app.parse_complete_callback([&] { pg::SetLogLevel(log_level); });
  pg::cli::AddGenerateCommand(app);
  pg::cli::AddChatCommand(app);
  pg::cli::AddServeCommand(app);
  pg::cli::AddSimCommand(app);
  CLI::App* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  pg::cli::AddBenchDecodeCommand(*bench);
#ifdef PEREGRINE_HAVE_CUDA
  pg::cli::AddBenchGpuDecodeCommand(*bench);
  pg::cli::AddBenchGpuPrefillCommand(*bench);
#endif
  pg::bench::AddAgenticCommand(*bench);
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
