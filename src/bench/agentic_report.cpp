// The stdout table and the result JSON of `bench agentic`.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/agentic.h"

namespace pg::bench {

using nlohmann::json;

namespace {

json StatsJson(const Stats& s) {
  return {{"count", s.count}, {"mean", s.mean}, {"min", s.min}, {"max", s.max},
          {"p50", s.p50},     {"p95", s.p95},   {"p99", s.p99}};
}

json OptionalJson(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

std::string Rate(const std::optional<double>& v) {
  return v ? fmt::format("{:.3f}", *v) : std::string("n/a");
}

}  // namespace

std::string FormatTable(const std::vector<LevelSummary>& levels) {
  std::string out;
  out += fmt::format(
      "{:>4} {:>5} {:>5} {:>4} | {:>9} {:>9} {:>9} | {:>9} {:>9} | {:>8} {:>8} {:>8} | {:>8} "
      "{:>9} | {:>9} {:>9} | {:>6} {:>6}\n",
      "conc", "convs", "reqs", "fail", "TTFT mean", "TTFT p50", "TTFT p99", "TTFT 1st", "TTFT>1st",
      "TPOT avg", "TPOT p99", "ITL p50", "tok/s/u", "E2E mean", "tot tok/s", "out tok/s", "KV hit",
      "KV>1st");
  out += fmt::format("{:>4} {:>5} {:>5} {:>4} | {:>9} {:>9} {:>9} | {:>9} {:>9} | {:>8} {:>8} "
                     "{:>8} | {:>8} {:>9} | {:>9} {:>9} | {:>6} {:>6}\n",
                     "", "", "", "", "ms", "ms", "ms", "ms mean", "ms mean", "ms", "ms", "ms", "",
                     "ms", "", "", "", "");
  for (const LevelSummary& l : levels) {
    out += fmt::format(
        "{:>4} {:>5} {:>5} {:>4} | {:>9.1f} {:>9.1f} {:>9.1f} | {:>9.1f} {:>9.1f} | {:>8.2f} "
        "{:>8.2f} {:>8.2f} | {:>8.1f} {:>9.1f} | {:>9.1f} {:>9.1f} | {:>6} {:>6}\n",
        l.concurrency, l.num_conversations, l.num_requests, l.num_failed, l.ttft_ms.mean,
        l.ttft_ms.p50, l.ttft_ms.p99, l.ttft_first_turn_ms.mean, l.ttft_later_turns_ms.mean,
        l.tpot_ms.mean, l.tpot_ms.p99, l.itl_ms.p50, l.per_user_tps, l.latency_ms.mean,
        l.total_throughput_tps, l.output_throughput_tps, Rate(l.kv_hit_rate),
        Rate(l.kv_hit_rate_later_turns));
  }
  return out;
}

std::string ResultToJson(const AgenticConfig& c, const AgenticResult& result) {
  json config = {
      {"url", c.url},
      {"model", result.model},
      {"chat_path", c.chat_path},
      {"dataset", c.dataset_path.empty() ? json("synthetic") : json(c.dataset_path)},
      {"preset", c.preset},
      {"concurrency", c.concurrency},
      {"conversations", c.conversations},
      {"first_turn_tokens", c.first_turn_tokens},
      {"turn_growth_tokens", c.turn_growth_tokens},
      {"min_turns", c.min_turns},
      {"max_turns", c.max_turns},
      {"max_tokens", c.max_tokens},
      {"ignore_eos", c.ignore_eos},
      {"seed", c.seed},
      {"warmup_conversations", c.warmup_conversations},
      {"warmup_turns", c.warmup_turns},
      {"num_gpus", c.num_gpus},
      {"token_counter", result.token_counter},
  };
  json levels = json::array();
  for (const LevelSummary& l : result.levels) {
    levels.push_back({
        {"concurrency", l.concurrency},
        {"num_conversations", l.num_conversations},
        {"num_requests", l.num_requests},
        {"num_failed", l.num_failed},
        {"wall_s", l.wall_s},
        {"prompt_tokens", l.prompt_tokens},
        {"completion_tokens", l.completion_tokens},
        {"cached_tokens", l.cached_tokens},
        {"num_cache_reports", l.num_cache_reports},
        {"total_throughput_tps", l.total_throughput_tps},
        {"output_throughput_tps", l.output_throughput_tps},
        {"throughput_per_gpu_tps", l.throughput_per_gpu_tps},
        {"request_rate_rps", l.request_rate_rps},
        {"kv_hit_rate", OptionalJson(l.kv_hit_rate)},
        {"kv_hit_rate_later_turns", OptionalJson(l.kv_hit_rate_later_turns)},
        {"per_user_tps", l.per_user_tps},
        {"ttft_ms", StatsJson(l.ttft_ms)},
        {"ttft_first_turn_ms", StatsJson(l.ttft_first_turn_ms)},
        {"ttft_later_turns_ms", StatsJson(l.ttft_later_turns_ms)},
        {"tpot_ms", StatsJson(l.tpot_ms)},
        {"itl_ms", StatsJson(l.itl_ms)},
        {"latency_ms", StatsJson(l.latency_ms)},
        {"prompt_tokens_per_request", StatsJson(l.prompt_tokens_per_request)},
        {"completion_tokens_per_request", StatsJson(l.completion_tokens_per_request)},
    });
  }
  json requests = json::array();
  for (const RequestRecord& r : result.requests) {
    std::optional<double> tpot = r.TpotMs();
    requests.push_back({
        {"concurrency", r.concurrency},
        {"conversation", r.conversation},
        {"turn", r.turn},
        {"warmup", r.warmup},
        {"success", r.success},
        {"error", r.error},
        {"start_s", r.start_s},
        {"ttft_ms", r.ttft_ms},
        {"first_chunk_ms", r.first_chunk_ms},
        {"latency_ms", r.latency_ms},
        {"tpot_ms", OptionalJson(tpot)},
        {"itl_ms", r.itl_ms},
        {"prompt_tokens", r.prompt_tokens},
        {"completion_tokens", r.completion_tokens},
        {"prompt_tokens_from_usage", r.prompt_tokens_from_usage},
        {"completion_tokens_from_usage", r.completion_tokens_from_usage},
        {"cached_tokens", r.cached_tokens ? json(*r.cached_tokens) : json(nullptr)},
        {"expected_prompt_tokens", r.expected_prompt_tokens},
        {"finish_reason", r.finish_reason},
    });
  }
  return json{{"benchmark", "agentic"},
              {"config", std::move(config)},
              {"levels", std::move(levels)},
              {"requests", std::move(requests)}}
      .dump(1, ' ', false, json::error_handler_t::replace);
}

}  // namespace pg::bench
