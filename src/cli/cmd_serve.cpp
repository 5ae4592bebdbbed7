// `peregrine serve`: the OpenAI-compatible server on one model (wired to the engine once the
// engine loop lands).
#include "cli/commands.h"
#include "core/status.h"

namespace pg::cli {

void AddServeCommand(CLI::App& app) {
  auto f = std::make_shared<ModelFlags>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
  f->Add(*cmd);
  cmd->callback([f] {
    Throw(ErrorCode::kUnsupported, "serve: not wired yet");
  });
}

}  // namespace pg::cli
