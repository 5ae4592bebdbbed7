#include "bench/agentic.h"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <numeric>

#include "bench/dataset.h"
#include "bench/replay.h"
#include "bench/synthetic.h"
#include "bench/token_counter.h"
#include "core/log.h"
#include "core/status.h"

namespace pg::bench {

using nlohmann::json;

void ApplyPreset(std::string_view name, AgenticConfig* c) {
  if (name == "k3") {
    // The seeds' workload: SWE-style trajectories at Kimi K3 scale.
    c->first_turn_tokens = 50000;
    c->turn_growth_tokens = 800;
    c->min_turns = 10;
    c->max_turns = 15;
    c->max_tokens = 500;
    c->concurrency = {1, 2, 4, 8, 16};
    c->conversations = {4, 8, 8, 16, 32};
  } else if (name == "cpu") {
    // Scaled for SmolLM2-135M on a 2-core machine: a few minutes end to end.
    c->first_turn_tokens = 1500;
    c->turn_growth_tokens = 120;
    c->min_turns = 3;
    c->max_turns = 5;
    c->max_tokens = 64;
    c->concurrency = {1, 2, 4};
    c->conversations = {2, 4, 8};
    c->warmup_turns = 1;
  } else {
    Throw(ErrorCode::kInvalidArgument, "unknown preset '{}' (known: k3, cpu)", name);
  }
  c->preset = std::string(name);
}

namespace {

void Validate(const AgenticConfig& c) {
  PG_ENSURE(!c.concurrency.empty(), kInvalidArgument, "--concurrency needs at least one level");
  PG_ENSURE(c.concurrency.size() == c.conversations.size(), kInvalidArgument,
            "--concurrency has {} levels but --conversations has {}; give one count per level",
            c.concurrency.size(), c.conversations.size());
  for (size_t i = 0; i < c.concurrency.size(); ++i) {
    PG_ENSURE(c.concurrency[i] >= 1, kInvalidArgument, "concurrency must be >= 1");
    PG_ENSURE(c.conversations[i] >= 1, kInvalidArgument, "conversations per level must be >= 1");
  }
  PG_ENSURE(c.max_tokens >= 1, kInvalidArgument, "--max-tokens must be >= 1");
  PG_ENSURE(c.num_gpus >= 1, kInvalidArgument, "--num-gpus must be >= 1");
  PG_ENSURE(c.warmup_conversations >= 0 && c.warmup_turns >= 0, kInvalidArgument,
            "warm-up counts must be >= 0");
  PG_ENSURE(c.timeout_s > 0, kInvalidArgument, "--timeout must be > 0");
}

std::string DiscoverModel(HttpClient& client) {
  HttpResponse resp = client.Get("/v1/models");
  PG_ENSURE(resp.status == 200, kIo, "GET /v1/models answered HTTP {}; pass --model",
            resp.status);
  json body = json::parse(resp.body, nullptr, false);
  PG_ENSURE(!body.is_discarded() && body.contains("data") && body["data"].is_array() &&
                !body["data"].empty() && body["data"][0].contains("id"),
            kMalformed, "GET /v1/models returned no model; pass --model");
  return body["data"][0]["id"].get<std::string>();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  PG_ENSURE(out.good(), kIo, "cannot write '{}'", path);
  out << text;
  PG_ENSURE(out.good(), kIo, "writing '{}' failed", path);
}

}  // namespace

AgenticResult RunAgentic(const AgenticConfig& config) {
  Validate(config);
  HttpClientParams client_params{ParseUrl(config.url), config.timeout_s, config.api_key};
  HttpClient client(client_params);
  AgenticResult result;
  result.model = config.model.empty() ? DiscoverModel(client) : config.model;

  ReplayParams replay;
  replay.client = client_params;
  replay.chat_path = config.chat_path;
  replay.model = result.model;
  replay.max_tokens = config.max_tokens;
  replay.ignore_eos = config.ignore_eos;
  if (!config.extra_body_json.empty()) {
    replay.extra_body = json::parse(config.extra_body_json, nullptr, false);
    PG_ENSURE(replay.extra_body.is_object(), kInvalidArgument,
              "--extra-body must be a JSON object (got '{}')", config.extra_body_json);
  }

  const int num_measured =
      std::accumulate(config.conversations.begin(), config.conversations.end(), 0);
  const int num_needed = config.warmup_conversations + num_measured;
  Dataset dataset;
  if (config.dataset_path.empty()) {
    std::unique_ptr<TokenCounter> counter = MakeTokenCounter(client_params, result.model);
    result.token_counter = counter->Name();
    SyntheticParams sp;
    sp.num_conversations = num_needed;
    sp.first_turn_tokens = config.first_turn_tokens;
    sp.turn_growth_tokens = config.turn_growth_tokens;
    sp.min_turns = config.min_turns;
    sp.max_turns = config.max_turns;
    sp.seed = config.seed;
    PG_LOG_INFO("generating {} synthetic conversations (first turn ~{} tokens, +{} per turn, "
                "{}-{} turns, seed {})",
                num_needed, sp.first_turn_tokens, sp.turn_growth_tokens, sp.min_turns,
                sp.max_turns, sp.seed);
    dataset = GenerateSynthetic(sp, *counter);
  } else {
    dataset = LoadEvalscopeFile(config.dataset_path);
    result.token_counter = "dataset";
    PG_ENSURE(static_cast<int>(dataset.conversations.size()) >= num_needed, kInvalidArgument,
              "{} has {} conversations but warm-up + levels need {} (each level uses "
              "conversations no earlier level used); lower --conversations or --warmup",
              config.dataset_path, dataset.conversations.size(), num_needed);
  }
  if (!config.save_dataset.empty()) WriteFile(config.save_dataset, DatasetToEvalscopeJson(dataset));

  ProgressBar progress(config.progress);
  std::span<const Conversation> all(dataset.conversations);
  int next = 0;
  if (config.warmup_conversations > 0) {
    LevelPlan plan{.concurrency = config.warmup_conversations,
                   .conversations = all.subspan(0, config.warmup_conversations),
                   .first_conversation_index = 0,
                   .warmup = true,
                   .max_turns = config.warmup_turns};
    int64_t num_turns = 0;
    for (const Conversation& c : plan.conversations) {
      num_turns += plan.max_turns > 0 ? std::min<int64_t>(plan.max_turns, c.turns.size())
                                      : static_cast<int64_t>(c.turns.size());
    }
    progress.Start("warmup", num_turns);
    LevelResult warm = RunLevel(replay, plan, &progress);
    progress.Finish();
    int failed = 0;
    for (RequestRecord& r : warm.records) {
      failed += r.success ? 0 : 1;
      if (!r.success) PG_LOG_WARN("warm-up request failed: {}", r.error);
      result.requests.push_back(std::move(r));
    }
    PG_LOG_INFO("warm-up: {} requests in {:.1f}s, {} failed", warm.records.size(), warm.wall_s,
                failed);
    next = config.warmup_conversations;
  }
  for (size_t level = 0; level < config.concurrency.size(); ++level) {
    LevelPlan plan{.concurrency = config.concurrency[level],
                   .conversations = all.subspan(next, config.conversations[level]),
                   .first_conversation_index = next,
                   .warmup = false,
                   .max_turns = 0};
    int64_t num_turns = 0;
    for (const Conversation& c : plan.conversations) num_turns += c.turns.size();
    progress.Start(fmt::format("c={}", plan.concurrency), num_turns);
    LevelResult lr = RunLevel(replay, plan, &progress);
    progress.Finish();
    LevelSummary summary = Aggregate(plan.concurrency, lr.records, lr.wall_s,
                                     config.conversations[level], config.num_gpus);
    PG_LOG_INFO("c={}: {} requests, {} failed, {:.1f}s", plan.concurrency, summary.num_requests,
                summary.num_failed, summary.wall_s);
    for (const RequestRecord& r : lr.records) {
      if (!r.success) {
        PG_LOG_WARN("c={} conversation {} turn {} failed: {}", r.concurrency, r.conversation,
                    r.turn, r.error);
      }
    }
    result.levels.push_back(summary);
    for (RequestRecord& r : lr.records) result.requests.push_back(std::move(r));
    next += config.conversations[level];
  }

  std::fputs(FormatTable(result.levels).c_str(), stdout);
  std::fflush(stdout);
  if (!config.output_json.empty()) {
    WriteFile(config.output_json, ResultToJson(config, result));
    PG_LOG_INFO("wrote {}", config.output_json);
  }
  if (!config.plot_dir.empty()) {
    PG_ENSURE(!config.output_json.empty(), kInvalidArgument, "--plot-dir needs --output");
    const std::string cmd = fmt::format("python3 '{}' '{}' --out-dir '{}'", config.plot_script,
                                        config.output_json, config.plot_dir);
    if (std::system(cmd.c_str()) != 0) {
      PG_LOG_WARN("plotting failed (needs matplotlib: pip install matplotlib); command: {}", cmd);
    }
  }
  return result;
}

}  // namespace pg::bench
