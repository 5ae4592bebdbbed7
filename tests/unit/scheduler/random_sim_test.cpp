// Randomized property test: thousands of operations (submits that share prefixes and grow
// conversations, aborts, steps) under many configurations, with every invariant checked after
// every step, every KV read checked by the fake executor, outputs compared with each request
// run alone, and every admitted request required to finish.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "unit/scheduler/fake_executor.h"

namespace pg::scheduler {
namespace {

using testing::FakeExecutor;
using testing::ReferenceOutput;

int32_t PagesForTest(size_t tokens, int32_t page) { return static_cast<int32_t>((tokens + page - 1) / page); }

struct Case {
  const char* name;
  int32_t pages, host_pages, page_size, budget, max_running;
  PreemptionMode mode;
  VictimPolicy victim;
  int32_t state_slots;
  int64_t ttl_us;
  int32_t drafts = 0;  // speculative decoding: drafts per decode (the fake's outputs repeat)
};

void RunRandom(const Case& k, uint32_t seed) {
  SchedulerConfig c;
  c.kv = cache::KvCacheConfig{k.page_size, k.pages, k.host_pages, true};
  c.state = StateCacheConfig{k.state_slots, k.state_slots * 4, 1 + int32_t(seed % 2)};
  c.max_step_tokens = k.budget;
  c.max_running_requests = k.max_running;
  c.max_prefill_chunk_tokens = seed % 3 == 0 ? 13 : 0;
  c.preemption = k.mode;
  c.victim = k.victim;
  c.session_ttl_us = k.ttl_us;
  c.admission_reserve_pages = seed % 2;
  c.speculative = {.num_draft_tokens = k.drafts, .min_ngram = 1 + int32_t(seed % 2), .max_ngram = 3};
  const int32_t window = k.drafts > 0 ? 2 : 0;
  Scheduler s(c);
  FakeExecutor exec(c, /*with_stops=*/true, window);
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> convs(5);
  std::map<RequestId, std::vector<int32_t>> prompts, outputs;
  std::map<RequestId, int32_t> max_new;
  std::map<RequestId, int64_t> submitted_at;
  std::map<RequestId, bool> aborted;
  std::set<RequestId> done;
  RequestId next_id = 1;
  int64_t now = 0;
  const int32_t max_total = k.pages * k.page_size;
  for (int op = 0; op < 1500 || s.HasWork(); ++op) {
    ASSERT_LT(op, 60000) << k.name << ": requests did not finish (starvation/deadlock)";
    const int r = rng() % 10;
    if (op < 1500 && r < 3) {
      auto& conv = convs[rng() % convs.size()];
      const size_t add = 1 + rng() % 30;
      for (size_t i = 0; i < add; ++i) conv.push_back(static_cast<int32_t>(rng() % 997));
      if (int32_t(conv.size()) > max_total / 2) conv.erase(conv.begin(), conv.begin() + conv.size() / 2);
      const int32_t mn = 1 + rng() % 25;
      const RequestId id = next_id++;
      SubmitParams p{conv, mn, rng() % 2 ? "s" + std::to_string(&conv - &convs[0]) : "",
                     static_cast<int32_t>(rng() % 3)};
      if (PagesForTest(conv.size() + mn, k.page_size) > k.pages) {
        EXPECT_THROW(s.Submit(id, p), pg::Error);
        continue;
      }
      exec.AddRequest(id, conv);
      prompts[id] = conv;
      max_new[id] = mn;
      submitted_at[id] = op;
      s.Submit(id, std::move(p));
    } else if (op < 1500 && r == 3 && !prompts.empty()) {
      const RequestId id = 1 + rng() % (next_id - 1);
      if (s.Abort(id)) aborted[id] = true;
    } else {
      const Plan& plan = s.NextPlan(now += 100);
      if (!plan.empty()) s.Advance(exec.Run(plan), now += 100);
      if (::testing::Test::HasFailure()) return;
    }
    for (auto& u : s.TakeUpdates()) {
      if (u.token) outputs[u.id].push_back(*u.token);
      if (u.finished) {
        EXPECT_TRUE(done.insert(u.id).second);
        EXPECT_LE(u.num_cached_tokens, u.num_prompt_tokens);
        if (u.reason != FinishReason::kAbort) {
          EXPECT_EQ(outputs[u.id], ReferenceOutput(prompts[u.id], max_new[u.id], true, window))
              << k.name << " request " << u.id;
        }
        exec.Forget(u.id);
      }
    }
    s.CheckInvariants();
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_EQ(done.size(), prompts.size()) << k.name;
  EXPECT_EQ(s.kv().num_available_pages(), k.pages) << k.name;
  EXPECT_EQ(exec.kv_errors, 0);
  const auto st = s.stats();
  ::testing::Test::RecordProperty(std::string(k.name) + "_preemptions", std::to_string(st.num_preemptions));
  if (k.pages <= 40) {
    EXPECT_GT(st.num_preemptions, 0) << k.name << ": no pressure tested";
  }
  EXPECT_GT(st.cached_prompt_tokens, 0) << k.name;
  ::testing::Test::RecordProperty(std::string(k.name) + "_drafts", std::to_string(st.accepted_draft_tokens) + "/" + std::to_string(st.draft_tokens));
  EXPECT_EQ(st.draft_tokens, exec.num_draft_tokens) << k.name;
  EXPECT_EQ(st.accepted_draft_tokens, exec.num_accepted_tokens) << k.name;
  if (k.drafts > 0) {  // both outcomes exercised
    EXPECT_GT(st.accepted_draft_tokens, 0) << k.name;
    EXPECT_LT(st.accepted_draft_tokens, st.draft_tokens) << k.name;
  }
}

class RandomSim : public ::testing::TestWithParam<Case> {};

TEST_P(RandomSim, InvariantsHoldAndEveryRequestFinishesWithItsAloneOutput) {
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    RunRandom(GetParam(), seed * 7919 + 3);
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Configs, RandomSim,
    ::testing::Values(
        Case{"tight_recompute_lowest", 30, 0, 4, 24, 6, PreemptionMode::kRecompute, VictimPolicy::kLowestRank, 0, 0},
        Case{"tight_recompute_longest", 30, 0, 4, 24, 6, PreemptionMode::kRecompute, VictimPolicy::kLongest, 0, 5000},
        Case{"tight_swap_host", 30, 25, 4, 24, 6, PreemptionMode::kSwap, VictimPolicy::kLowestRank, 0, 5000},
        Case{"tight_swap_small_host", 30, 6, 5, 17, 5, PreemptionMode::kSwap, VictimPolicy::kLongest, 0, 0},
        Case{"hybrid_tight", 32, 10, 4, 20, 4, PreemptionMode::kSwap, VictimPolicy::kLowestRank, 4, 5000},
        Case{"roomy", 400, 100, 16, 64, 16, PreemptionMode::kRecompute, VictimPolicy::kLowestRank, 0, 20000},
        Case{"spec_tight_recompute", 30, 0, 4, 24, 6, PreemptionMode::kRecompute, VictimPolicy::kLowestRank, 0, 5000, 4},
        Case{"spec_tight_swap", 30, 25, 4, 24, 6, PreemptionMode::kSwap, VictimPolicy::kLongest, 0, 5000, 3},
        Case{"spec_roomy", 400, 100, 16, 64, 16, PreemptionMode::kRecompute, VictimPolicy::kLowestRank, 0, 20000, 6}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace pg::scheduler
