// CLI11 registration of `bench agentic`. Presets give defaults; flags given explicitly win.
#include <CLI/CLI.hpp>

#include <functional>
#include <memory>

#include "bench/agentic.h"
#include "core/status.h"

namespace pg::bench {

namespace {

// Parsed flags land in `raw`; `copies` moves each explicitly given flag onto the preset-based
// config, so `--preset cpu --max-tokens 16` keeps every cpu value except max_tokens.
struct CliState {
  AgenticConfig raw;
  std::string preset;
  bool synthetic = false;
  bool no_ignore_eos = false;
  bool no_progress = false;
  std::vector<std::pair<CLI::Option*, std::function<void(const AgenticConfig&, AgenticConfig&)>>>
      copies;
};

template <typename T>
void Bind(CLI::App* app, CliState* st, const std::string& name, T AgenticConfig::*field,
          const std::string& help) {
  CLI::Option* opt = app->add_option(name, st->raw.*field, help);
  opt->capture_default_str();
  if constexpr (std::is_same_v<T, std::vector<int>>) opt->delimiter(',');
  st->copies.emplace_back(opt, [field](const AgenticConfig& from, AgenticConfig& to) {
    to.*field = from.*field;
  });
}

AgenticConfig Resolve(const CliState& st) {
  AgenticConfig config;
  if (!st.preset.empty()) ApplyPreset(st.preset, &config);
  for (const auto& [opt, copy] : st.copies) {
    if (opt->count() > 0) copy(st.raw, config);
  }
  PG_ENSURE(!(st.synthetic && !config.dataset_path.empty()), kInvalidArgument,
            "--synthetic and --dataset exclude each other");
  if (st.no_ignore_eos) config.ignore_eos = false;
  if (st.no_progress) config.progress = false;
  return config;
}

}  // namespace

CLI::App* AddAgenticCommand(CLI::App& parent) {
  return AddAgenticCommand(parent, [](const AgenticConfig& config) { RunAgentic(config); });
}

CLI::App* AddAgenticCommand(CLI::App& parent, std::function<void(const AgenticConfig&)> run) {
  auto st = std::make_shared<CliState>();
  CLI::App* app = parent.add_subcommand(
      "agentic", "Multi-turn agentic replay (evalscope SWE-smith semantics) against an "
                 "OpenAI-compatible server");
  Bind(app, st.get(), "--url", &AgenticConfig::url, "Server root, e.g. http://127.0.0.1:8000");
  Bind(app, st.get(), "--model", &AgenticConfig::model,
       "Model name sent in requests (default: first of /v1/models)");
  Bind(app, st.get(), "--endpoint", &AgenticConfig::chat_path, "Chat completions path");
  Bind(app, st.get(), "--api-key", &AgenticConfig::api_key, "Bearer token, if the server needs one");
  Bind(app, st.get(), "--dataset", &AgenticConfig::dataset_path,
       "evalscope SWE-smith JSON file (default: synthetic)");
  app->add_flag("--synthetic", st->synthetic, "Use the synthetic generator (the default)");
  Bind(app, st.get(), "--concurrency", &AgenticConfig::concurrency,
       "Concurrency levels, comma-separated");
  Bind(app, st.get(), "--conversations", &AgenticConfig::conversations,
       "Conversations per level, comma-separated (one per level, never reused across levels)");
  Bind(app, st.get(), "--first-turn-tokens", &AgenticConfig::first_turn_tokens,
       "Synthetic: tokens of the first turn");
  Bind(app, st.get(), "--turn-tokens", &AgenticConfig::turn_growth_tokens,
       "Synthetic: new tokens per later turn");
  Bind(app, st.get(), "--min-turns", &AgenticConfig::min_turns, "Synthetic: fewest turns");
  Bind(app, st.get(), "--max-turns", &AgenticConfig::max_turns, "Synthetic: most turns");
  Bind(app, st.get(), "--max-tokens", &AgenticConfig::max_tokens, "Output tokens per reply");
  app->add_flag("--no-ignore-eos", st->no_ignore_eos, "Let the model stop at EOS");
  Bind(app, st.get(), "--seed", &AgenticConfig::seed, "Synthetic generator seed");
  Bind(app, st.get(), "--warmup", &AgenticConfig::warmup_conversations,
       "Warm-up conversations (not measured)");
  Bind(app, st.get(), "--warmup-turns", &AgenticConfig::warmup_turns,
       "Turns of each warm-up conversation (0: all)");
  Bind(app, st.get(), "--num-gpus", &AgenticConfig::num_gpus,
       "GPUs serving the model, for per-GPU throughput");
  Bind(app, st.get(), "--timeout", &AgenticConfig::timeout_s, "Per-request timeout, seconds");
  Bind(app, st.get(), "--extra-body", &AgenticConfig::extra_body_json,
       "JSON object merged into every request body");
  Bind(app, st.get(), "--output,-o", &AgenticConfig::output_json,
       "JSON file of every request and level");
  Bind(app, st.get(), "--save-dataset", &AgenticConfig::save_dataset,
       "Write the dataset used (evalscope format)");
  Bind(app, st.get(), "--plot-dir", &AgenticConfig::plot_dir, "Make PNG plots in this folder");
  Bind(app, st.get(), "--plot-script", &AgenticConfig::plot_script, "Plot script path");
  app->add_flag("--no-progress", st->no_progress, "No progress bar");
  app->add_option("--preset", st->preset, "Workload preset: k3 or cpu")
      ->check(CLI::IsMember({"k3", "cpu"}));
  app->callback([st, run = std::move(run)]() { run(Resolve(*st)); });
  return app;
}

}  // namespace pg::bench
