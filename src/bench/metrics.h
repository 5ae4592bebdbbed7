// Per-request measurements and their aggregation per concurrency level, with the metric
// definitions of evalscope perf / TokenSpeed's agentic benchmark:
//   TTFT        send -> first SSE chunk whose delta carries output (content, reasoning,
//               tool calls); a role-only opening chunk does not count                 [ms]
//   latency     send -> end of stream (end-to-end)                                  [ms]
//   TPOT        (latency - TTFT) / (completion_tokens - 1), requests with >= 2 tokens [ms]
//   ITL         gaps between consecutive content-carrying chunks after the first    [ms]
//   per-user decode speed  1000 / mean TPOT                                          [tokens/s]
//   total throughput       (Σ prompt + Σ completion tokens) / level wall time        [tokens/s]
//   output throughput      Σ completion tokens / level wall time                     [tokens/s]
//   KV hit rate            Σ cached / Σ prompt tokens (usage.prompt_tokens_details.cached_tokens)
// Only successful, non-warm-up requests enter latency statistics and token sums.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace pg::bench {

struct RequestRecord {
  int concurrency = 0;       // level this request ran in
  int conversation = 0;      // global conversation index in the dataset
  int turn = 0;              // 0-based turn index inside the conversation
  bool warmup = false;
  bool success = false;
  std::string error;         // set when !success
  double start_s = 0;        // send time, seconds since the level started
  double ttft_ms = 0;        // send -> first chunk carrying generated output
  double first_chunk_ms = 0; // send -> first chunk with non-empty "choices" (may be role-only)
  double latency_ms = 0;
  std::vector<double> itl_ms;  // one per content chunk after the first
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  bool prompt_tokens_from_usage = false;      // else: dataset's count (approximate)
  bool completion_tokens_from_usage = false;  // else: number of content chunks
  std::optional<int64_t> cached_tokens;       // reported by the server, when it does
  int64_t expected_prompt_tokens = -1;        // from the dataset, -1 unknown
  std::string finish_reason;

  // (latency - TTFT) / (completion_tokens - 1); nullopt below 2 tokens or on failure.
  std::optional<double> TpotMs() const;
};

struct Stats {
  size_t count = 0;
  double mean = 0, min = 0, max = 0, p50 = 0, p95 = 0, p99 = 0;
};

// Percentiles by linear interpolation between closest ranks (numpy's default), so figures
// are comparable with evalscope/vLLM tooling. An empty input gives count == 0 and zeros.
Stats Summarize(std::vector<double> values);
// The q-quantile (q in [0,1]) of sorted values by the same rule.
double Quantile(const std::vector<double>& sorted, double q);

struct LevelSummary {
  int concurrency = 0;
  int num_conversations = 0;   // conversations started in this level
  int num_requests = 0;        // turns sent (success + failed)
  int num_failed = 0;
  double wall_s = 0;           // level start -> last response finished
  int64_t prompt_tokens = 0;   // successful requests only
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;   // over requests that reported cached_tokens
  int64_t prompt_tokens_with_cache_report = 0;
  int num_cache_reports = 0;
  double total_throughput_tps = 0;
  double output_throughput_tps = 0;
  double throughput_per_gpu_tps = 0;  // total throughput / num_gpus
  double request_rate_rps = 0;
  std::optional<double> kv_hit_rate;              // all turns; nullopt if no report
  std::optional<double> kv_hit_rate_later_turns;  // turns >= 1 only
  double per_user_tps = 0;                        // 1000 / mean TPOT; 0 without TPOT samples
  Stats ttft_ms, ttft_first_turn_ms, ttft_later_turns_ms, tpot_ms, itl_ms, latency_ms;
  Stats prompt_tokens_per_request, completion_tokens_per_request;
};

// `records` may hold any requests; only those of `concurrency` that are not warm-up count.
LevelSummary Aggregate(int concurrency, std::span<const RequestRecord> records, double wall_s,
                       int num_conversations, int num_gpus);

}  // namespace pg::bench
