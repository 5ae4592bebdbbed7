#include "bench/metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/status.h"

namespace pg::bench {

std::optional<double> RequestRecord::TpotMs() const {
  if (!success || completion_tokens < 2) return std::nullopt;
  return (latency_ms - ttft_ms) / static_cast<double>(completion_tokens - 1);
}

double Quantile(const std::vector<double>& sorted, double q) {
  PG_CHECK(!sorted.empty());
  PG_CHECK(q >= 0.0 && q <= 1.0);
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(pos));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(below);
  return sorted[below] + (sorted[above] - sorted[below]) * frac;
}

Stats Summarize(std::vector<double> values) {
  Stats s;
  s.count = values.size();
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.min = values.front();
  s.max = values.back();
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(s.count);
  s.p50 = Quantile(values, 0.50);
  s.p95 = Quantile(values, 0.95);
  s.p99 = Quantile(values, 0.99);
  return s;
}

LevelSummary Aggregate(int concurrency, std::span<const RequestRecord> records, double wall_s,
                       int num_conversations, int num_gpus) {
  PG_CHECK(num_gpus >= 1);
  LevelSummary out;
  out.concurrency = concurrency;
  out.num_conversations = num_conversations;
  out.wall_s = wall_s;
  std::vector<double> ttft, ttft_first, ttft_later, tpot, itl, latency, prompt, completion;
  int64_t later_cached = 0, later_prompt = 0;
  int num_later_reports = 0;
  for (const RequestRecord& r : records) {
    if (r.warmup || r.concurrency != concurrency) continue;
    ++out.num_requests;
    if (!r.success) {
      ++out.num_failed;
      continue;
    }
    out.prompt_tokens += r.prompt_tokens;
    out.completion_tokens += r.completion_tokens;
    ttft.push_back(r.ttft_ms);
    (r.turn == 0 ? ttft_first : ttft_later).push_back(r.ttft_ms);
    latency.push_back(r.latency_ms);
    itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
    prompt.push_back(static_cast<double>(r.prompt_tokens));
    completion.push_back(static_cast<double>(r.completion_tokens));
    if (auto t = r.TpotMs()) tpot.push_back(*t);
    if (r.cached_tokens) {
      ++out.num_cache_reports;
      out.cached_tokens += *r.cached_tokens;
      out.prompt_tokens_with_cache_report += r.prompt_tokens;
      if (r.turn > 0) {
        ++num_later_reports;
        later_cached += *r.cached_tokens;
        later_prompt += r.prompt_tokens;
      }
    }
  }
  if (wall_s > 0) {
    out.total_throughput_tps = static_cast<double>(out.prompt_tokens + out.completion_tokens) / wall_s;
    out.output_throughput_tps = static_cast<double>(out.completion_tokens) / wall_s;
    out.request_rate_rps = static_cast<double>(out.num_requests - out.num_failed) / wall_s;
  }
  out.throughput_per_gpu_tps = out.total_throughput_tps / num_gpus;
  if (out.num_cache_reports > 0 && out.prompt_tokens_with_cache_report > 0) {
    out.kv_hit_rate = static_cast<double>(out.cached_tokens) /
                      static_cast<double>(out.prompt_tokens_with_cache_report);
  }
  if (num_later_reports > 0 && later_prompt > 0) {
    out.kv_hit_rate_later_turns =
        static_cast<double>(later_cached) / static_cast<double>(later_prompt);
  }
  out.ttft_ms = Summarize(std::move(ttft));
  out.ttft_first_turn_ms = Summarize(std::move(ttft_first));
  out.ttft_later_turns_ms = Summarize(std::move(ttft_later));
  out.tpot_ms = Summarize(std::move(tpot));
  out.itl_ms = Summarize(std::move(itl));
  out.latency_ms = Summarize(std::move(latency));
  out.prompt_tokens_per_request = Summarize(std::move(prompt));
  out.completion_tokens_per_request = Summarize(std::move(completion));
  if (out.tpot_ms.count > 0 && out.tpot_ms.mean > 0) out.per_user_tps = 1000.0 / out.tpot_ms.mean;
  return out;
}

}  // namespace pg::bench
