// The simulator on a small agentic trace: session retention must raise the session hit rate
// when one-shot traffic competes for KV, and the host tier must raise it further.
#include <gtest/gtest.h>

#include "scheduler/sim/simulator.h"

namespace pg::scheduler::sim {
namespace {

SimConfig SmallAgentic() {
  SimConfig c;
  c.scheduler.kv = cache::KvCacheConfig{16, 6000, 0, true};  // 96K tokens of KV
  c.scheduler.max_step_tokens = 4096;
  c.scheduler.max_running_requests = 32;
  c.trace.num_sessions = 24;
  c.trace.concurrency = 8;
  c.trace.first_turn_tokens = 4000;
  c.trace.tokens_per_turn = 300;
  c.trace.min_turns = 4;
  c.trace.max_turns = 6;
  c.trace.output_tokens = 60;
  c.trace.think_time_mean_s = 3;
  c.trace.background_requests_per_s = 2;
  c.trace.background_prompt_tokens = 3000;
  c.trace.background_output_tokens = 20;
  return c;
}

TEST(Simulator, SessionRetentionAndHostTierRaiseHitRate) {
  SimConfig plain = SmallAgentic();
  SimConfig retained = plain;
  retained.scheduler.session_ttl_us = 30'000'000;
  SimConfig host = retained;
  host.scheduler.kv.num_host_pages = 40000;
  SimConfig plain_host = plain;
  plain_host.scheduler.kv.num_host_pages = 40000;
  const SimResult a = RunSimulation(plain), b = RunSimulation(retained), h = RunSimulation(host);
  const SimResult ph = RunSimulation(plain_host);
  EXPECT_GT(ph.cache_hit_rate, a.cache_hit_rate + 0.05);  // the host tier alone also helps
  EXPECT_GT(ph.host_hit_pages, 0);
  // Same trace (same seed): same number of session turns.
  EXPECT_EQ(a.num_requests, b.num_requests);
  EXPECT_GT(a.cache_hit_rate, 0.0);
  EXPECT_GT(b.cache_hit_rate, a.cache_hit_rate + 0.05)
      << "plain " << a.cache_hit_rate << " retained " << b.cache_hit_rate;
  EXPECT_GE(h.cache_hit_rate, b.cache_hit_rate);
  EXPECT_LT(b.ttft_mean_ms, a.ttft_mean_ms);
  EXPECT_LE(b.cache_hit_rate, 1.0);
}

TEST(Simulator, RejectsBadTrace) {
  SimConfig c = SmallAgentic();
  c.trace.num_sessions = 0;
  EXPECT_THROW(RunSimulation(c), pg::Error);
}

}  // namespace
}  // namespace pg::scheduler::sim
