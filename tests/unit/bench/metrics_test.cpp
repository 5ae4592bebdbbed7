// Metric arithmetic on hand-made timings; every expected value is worked out by hand below.
#include <gtest/gtest.h>

#include "bench/metrics.h"

namespace pg::bench {
namespace {

RequestRecord Req(int turn, double ttft, double latency, int64_t prompt, int64_t completion,
                  std::optional<int64_t> cached, std::vector<double> itl = {}) {
  RequestRecord r;
  r.concurrency = 2;
  r.turn = turn;
  r.success = true;
  r.ttft_ms = ttft;
  r.latency_ms = latency;
  r.prompt_tokens = prompt;
  r.completion_tokens = completion;
  r.cached_tokens = cached;
  r.itl_ms = std::move(itl);
  return r;
}

TEST(Metrics, QuantilesInterpolateLikeNumpy) {
  // numpy.percentile([1, 2, 3, 4, 10], [50, 95, 99]) == [3.0, 8.8, 9.76]
  Stats s = Summarize({10, 2, 4, 1, 3});
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.mean, 4.0);
  EXPECT_DOUBLE_EQ(s.min, 1.0);
  EXPECT_DOUBLE_EQ(s.max, 10.0);
  EXPECT_DOUBLE_EQ(s.p50, 3.0);
  EXPECT_NEAR(s.p95, 8.8, 1e-12);
  EXPECT_NEAR(s.p99, 9.76, 1e-12);
  // Even count: median between the middle two.
  EXPECT_DOUBLE_EQ(Summarize({7, 1, 3, 5}).p50, 4.0);
  EXPECT_EQ(Summarize({}).count, 0u);
  EXPECT_DOUBLE_EQ(Summarize({42}).p99, 42.0);
}

TEST(Metrics, TpotNeedsTwoTokens) {
  RequestRecord r = Req(0, 100, 1100, 10, 11, std::nullopt);
  ASSERT_TRUE(r.TpotMs().has_value());
  EXPECT_DOUBLE_EQ(*r.TpotMs(), 100.0);  // (1100 - 100) / (11 - 1)
  r.completion_tokens = 1;
  EXPECT_FALSE(r.TpotMs().has_value());
  r.completion_tokens = 11;
  r.success = false;
  EXPECT_FALSE(r.TpotMs().has_value());
}

TEST(Metrics, AggregateLevel) {
  std::vector<RequestRecord> records = {
      // turn 0 of two conversations, turn 1 and 2 of one.
      Req(0, 200, 1200, 1000, 11, 0, {90, 110}),   // TPOT 100
      Req(0, 300, 1800, 1200, 16, 16, {100}),      // TPOT 100
      Req(1, 50, 850, 1300, 17, 1100, {50, 60}),   // TPOT 50
      Req(2, 70, 1320, 1500, 26, 1400),            // TPOT 50
  };
  RequestRecord failed = Req(1, 0, 30, 999, 0, std::nullopt);
  failed.success = false;
  records.push_back(failed);
  RequestRecord other_level = Req(1, 5, 6, 100000, 5, 0);
  other_level.concurrency = 4;
  records.push_back(other_level);
  RequestRecord warm = Req(1, 5, 6, 100000, 5, 0);
  warm.warmup = true;
  records.push_back(warm);

  LevelSummary s = Aggregate(2, records, /*wall_s=*/10.0, /*num_conversations=*/2, /*num_gpus=*/2);
  EXPECT_EQ(s.num_requests, 5);  // 4 ok + 1 failed; other level and warm-up excluded
  EXPECT_EQ(s.num_failed, 1);
  EXPECT_EQ(s.prompt_tokens, 5000);
  EXPECT_EQ(s.completion_tokens, 70);
  EXPECT_DOUBLE_EQ(s.total_throughput_tps, 507.0);  // (5000 + 70) / 10
  EXPECT_DOUBLE_EQ(s.output_throughput_tps, 7.0);
  EXPECT_DOUBLE_EQ(s.throughput_per_gpu_tps, 253.5);
  EXPECT_DOUBLE_EQ(s.request_rate_rps, 0.4);
  EXPECT_DOUBLE_EQ(s.tpot_ms.mean, 75.0);
  EXPECT_NEAR(s.per_user_tps, 1000.0 / 75.0, 1e-12);
  EXPECT_DOUBLE_EQ(s.ttft_ms.mean, 155.0);  // (200 + 300 + 50 + 70) / 4
  EXPECT_DOUBLE_EQ(s.ttft_first_turn_ms.mean, 250.0);
  EXPECT_DOUBLE_EQ(s.ttft_later_turns_ms.mean, 60.0);
  EXPECT_EQ(s.itl_ms.count, 5u);
  EXPECT_DOUBLE_EQ(s.itl_ms.mean, 82.0);  // (90 + 110 + 100 + 50 + 60) / 5
  EXPECT_DOUBLE_EQ(s.latency_ms.mean, 1292.5);
  // KV hit: (0 + 16 + 1100 + 1400) / 5000; later turns: 2500 / 2800.
  ASSERT_TRUE(s.kv_hit_rate.has_value());
  EXPECT_DOUBLE_EQ(*s.kv_hit_rate, 2516.0 / 5000.0);
  ASSERT_TRUE(s.kv_hit_rate_later_turns.has_value());
  EXPECT_DOUBLE_EQ(*s.kv_hit_rate_later_turns, 2500.0 / 2800.0);
}

TEST(Metrics, NoCacheReportsMeansNoHitRate) {
  std::vector<RequestRecord> records = {Req(0, 10, 20, 100, 3, std::nullopt),
                                        Req(1, 10, 20, 150, 3, std::nullopt)};
  LevelSummary s = Aggregate(2, records, 1.0, 1, 1);
  EXPECT_FALSE(s.kv_hit_rate.has_value());
  EXPECT_FALSE(s.kv_hit_rate_later_turns.has_value());
  // A report of 0 cached tokens is a real 0, not a missing value.
  records[1].cached_tokens = 0;
  s = Aggregate(2, records, 1.0, 1, 1);
  ASSERT_TRUE(s.kv_hit_rate.has_value());
  EXPECT_DOUBLE_EQ(*s.kv_hit_rate, 0.0);
}

}  // namespace
}  // namespace pg::bench
