// `peregrine bench agentic`: multi-turn agentic replay against any OpenAI-compatible server
// (issue 5). Library entry point RunAgentic() plus the CLI11 registration used by the
// `peregrine` command and by the stand-alone `peregrine-bench` tool.
//
// Flow: probe /tokenize -> dataset (evalscope file or synthetic) -> warm-up -> for each
// concurrency level P_i, replay conversations_i fresh conversations (none reused across
// levels) with P_i closed-loop workers -> table on stdout, JSON of every request and level,
// optional PNG plots through tools/bench/plot_agentic.py.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/metrics.h"

namespace CLI {
class App;
}

namespace pg::bench {

struct AgenticConfig {
  std::string url = "http://127.0.0.1:8000";  // server root; a trailing /v1 is accepted
  std::string model;                          // "model" field; empty: first of /v1/models
  std::string chat_path = "/v1/chat/completions";
  std::string api_key;
  std::string dataset_path;  // evalscope JSON; empty means synthetic
  std::vector<int> concurrency = {1, 2, 4, 8, 16};
  std::vector<int> conversations = {4, 8, 8, 16, 32};  // per level; same length as concurrency
  // Synthetic workload (k3 preset values by default).
  int64_t first_turn_tokens = 50000;
  int64_t turn_growth_tokens = 800;
  int min_turns = 10;
  int max_turns = 15;
  int max_tokens = 500;  // output tokens per reply
  bool ignore_eos = true;
  uint64_t seed = 42;
  int warmup_conversations = 1;  // replayed first, not measured, never reused
  int warmup_turns = 2;          // turns of each warm-up conversation (0: all)
  int num_gpus = 1;              // divides throughput for "per GPU" figures
  double timeout_s = 1800;       // per request
  std::string extra_body_json;   // JSON object merged into every request
  std::string output_json = "bench_agentic.json";
  std::string save_dataset;      // when set, the dataset used is written here (evalscope format)
  std::string plot_dir;          // when set, PNG plots are made here
  std::string plot_script = "tools/bench/plot_agentic.py";
  bool progress = true;
  std::string preset;            // informative: the preset applied, if any
};

// Applies a named preset ("k3" or "cpu") to *config. Unknown names: pg::Error.
void ApplyPreset(std::string_view name, AgenticConfig* config);

struct AgenticResult {
  std::vector<LevelSummary> levels;
  std::vector<RequestRecord> requests;  // every request, warm-up included (flagged)
  std::string model;                    // as sent
  std::string token_counter;            // "vllm", "llama.cpp" or "estimate"
};

// Runs the whole benchmark and writes the outputs the config names. Throws pg::Error for bad
// configuration, an unreachable server or an unusable dataset; failed turns are results.
AgenticResult RunAgentic(const AgenticConfig& config);

// Output helpers (also used by tests).
std::string FormatTable(const std::vector<LevelSummary>& levels);
std::string ResultToJson(const AgenticConfig& config, const AgenticResult& result);

// Registers the "agentic" subcommand on `parent` (e.g. the "bench" subcommand of `peregrine`)
// with every option of AgenticConfig and --preset; presets set defaults that explicit flags
// override. Its callback runs RunAgentic (errors propagate as pg::Error to the caller's
// handler). Returns the subcommand.
CLI::App* AddAgenticCommand(CLI::App& parent);
// The same, with the action taken on the resolved config replaced (tests, dry runs).
CLI::App* AddAgenticCommand(CLI::App& parent,
                            std::function<void(const AgenticConfig&)> run);

}  // namespace pg::bench
