// peregrine-bench: the benchmark clients as a stand-alone tool, until `peregrine bench` wires
// the same registration functions into the main command.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "bench/agentic.h"
#include "core/log.h"
#include "core/status.h"

int main(int argc, char** argv) {
  CLI::App app{"Peregrine benchmark clients"};
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->each([](const std::string& level) { pg::SetLogLevel(level); });
  app.require_subcommand(1);
  pg::bench::AddAgenticCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const pg::Error& e) {
    std::fprintf(stderr, "error (%s): %s\n", std::string(pg::ErrorCodeName(e.code())).c_str(),
                 e.what());
    return 1;
  }
  return 0;
}
