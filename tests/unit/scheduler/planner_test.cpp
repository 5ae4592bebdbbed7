#include <gtest/gtest.h>

#include <map>
#include <random>

#include "unit/scheduler/fake_executor.h"

namespace pg::scheduler {
namespace {

using testing::FakeExecutor;
using testing::Harness;
using testing::ReferenceOutput;

std::vector<int32_t> RandomPrompt(std::mt19937& rng, size_t n) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 997);
  return t;
}

SchedulerConfig SmallConfig() {
  SchedulerConfig c;
  c.kv = cache::KvCacheConfig{7, 64, 0, true};
  c.max_step_tokens = 50;
  c.max_running_requests = 8;
  return c;
}

TEST(Planner, ChunkedPrefillThenDecodeThenLengthFinish) {
  Harness h(SmallConfig());
  std::mt19937 rng(1);
  auto prompt = RandomPrompt(rng, 123);
  h.Submit(1, prompt, 5);
  std::vector<int32_t> chunk_sizes;
  for (int i = 0; i < 3; ++i) {
    Plan p = h.Step();
    ASSERT_EQ(p.entries.size(), 1u);
    chunk_sizes.push_back(p.entries[0].num_tokens);
    EXPECT_EQ(p.entries[0].first_position, 50 * i);
    EXPECT_EQ(p.entries[0].num_sample, i == 2 ? 1 : 0);
  }
  EXPECT_EQ(chunk_sizes, (std::vector<int32_t>{50, 50, 23}));
  Plan d = h.Step();
  ASSERT_EQ(d.entries.size(), 1u);
  EXPECT_TRUE(d.entries[0].is_decode);
  EXPECT_EQ(d.entries[0].first_position, 123);
  EXPECT_EQ(d.entries[0].page_table.size(), 18u);  // ceil(124 / 7)
  h.RunAll();
  EXPECT_EQ(h.outputs[1], ReferenceOutput(prompt, 5, false));
  EXPECT_EQ(h.finished[1].reason, FinishReason::kLength);
  EXPECT_EQ(h.finished[1].num_generated_tokens, 5);
  // Every page came back (cached pages are evictable, nothing is referenced).
  EXPECT_EQ(h.s.kv().num_available_pages(), 64);
}

TEST(Planner, DecodesFirstPrefillFillsTheRestOfTheBudget) {
  Harness h(SmallConfig());
  std::mt19937 rng(2);
  h.Submit(1, RandomPrompt(rng, 10), 20);
  h.Submit(2, RandomPrompt(rng, 11), 20);
  h.Step();  // both prefills (21 tokens)
  h.Submit(3, RandomPrompt(rng, 200), 3);
  Plan p = h.Step();
  ASSERT_EQ(p.entries.size(), 3u);
  EXPECT_TRUE(p.entries[0].is_decode);
  EXPECT_TRUE(p.entries[1].is_decode);
  EXPECT_EQ(p.entries[2].id, 3u);
  EXPECT_EQ(p.entries[2].num_tokens, 48);  // 50 - 2 decodes
  EXPECT_EQ(p.num_tokens, 50);
  EXPECT_EQ(p.num_decode_entries, 2);
  h.RunAll();
}

TEST(Planner, RunningCapIsRespected) {
  SchedulerConfig c = SmallConfig();
  c.max_running_requests = 3;
  Harness h(c);
  std::mt19937 rng(3);
  for (RequestId id = 1; id <= 7; ++id) h.Submit(id, RandomPrompt(rng, 5), 4);
  Plan p = h.Step();
  EXPECT_EQ(p.entries.size(), 3u);
  EXPECT_EQ(h.s.stats().num_running, 3);
  EXPECT_EQ(h.s.stats().num_waiting, 4);
  h.RunAll();
  for (RequestId id = 1; id <= 7; ++id) EXPECT_EQ(h.outputs[id].size(), 4u);
}

TEST(Planner, NextTurnOfASessionHitsPromptAndOutputPages) {
  SchedulerConfig c = SmallConfig();
  c.session_ttl_us = 1'000'000;
  Harness h(c);
  std::mt19937 rng(4);
  auto prompt1 = RandomPrompt(rng, 40);
  h.Submit(1, prompt1, 12, "conv-a");
  h.RunAll();
  EXPECT_EQ(h.finished[1].num_cached_tokens, 0);
  // Turn 2: prompt1 + output1 + new user text. Computed tokens of turn 1: 40 + 11 = 51
  // (the last sampled token never went through the model) -> 7 full pages = 49 tokens.
  auto prompt2 = prompt1;
  prompt2.insert(prompt2.end(), h.outputs[1].begin(), h.outputs[1].end());
  auto user = RandomPrompt(rng, 9);
  prompt2.insert(prompt2.end(), user.begin(), user.end());
  h.Submit(2, prompt2, 4, "conv-a");
  h.RunAll();
  EXPECT_EQ(h.finished[2].num_cached_tokens, 49);
  EXPECT_EQ(h.outputs[2], ReferenceOutput(prompt2, 4, false));
  EXPECT_EQ(h.s.stats().cached_prompt_tokens, 49);
}

TEST(Planner, RepeatedPromptHitIsCappedSoTheLastTokenIsComputed) {
  Harness h(SmallConfig());
  std::mt19937 rng(5);
  auto prompt = RandomPrompt(rng, 35);  // exactly 5 pages
  h.Submit(1, prompt, 2);
  h.RunAll();
  h.Submit(2, prompt, 2);
  Plan p = h.Step();
  ASSERT_EQ(p.entries.size(), 1u);
  EXPECT_EQ(p.entries[0].first_position, 28);  // (35 - 1) / 7 * 7
  EXPECT_EQ(p.entries[0].num_cached_tokens, 28);
  h.RunAll();
  EXPECT_EQ(h.outputs[2], h.outputs[1]);
}

// Two requests on one prompt arriving while the first prefills (an agent's parallel calls on
// one context): the second waits for the first's pages to reach the prefix cache instead of
// computing them again, then takes them as a hit. A different prompt is not held back, and the
// wait ends when the first request goes away.
TEST(Planner, SharedPrefixArrivingTogetherIsComputedOnce) {
  SchedulerConfig c = SmallConfig();
  c.max_prefill_chunk_tokens = 14;
  Harness h(c);
  std::mt19937 rng(9);
  auto prompt = RandomPrompt(rng, 60);  // 8 full pages + 4 tokens
  h.Submit(1, prompt, 3);
  Plan first = h.Step();
  ASSERT_EQ(first.entries.size(), 1u);
  h.Submit(2, prompt, 3);
  for (int step = 0; step < 3; ++step) {  // request 1 computes pages 2..7 meanwhile
    Plan p = h.Step();
    ASSERT_EQ(p.entries.size(), 1u) << "step " << step;
    EXPECT_EQ(p.entries[0].id, 1u);
  }
  h.RunAll();
  EXPECT_EQ(h.finished[2].num_cached_tokens, 56);  // (60 - 1) / 7 full pages
  EXPECT_EQ(h.outputs[2], ReferenceOutput(prompt, 3, false));
  EXPECT_EQ(h.outputs[1], h.outputs[2]);
  // Computed: 60 + 2 decodes for request 1, 4 + 2 for request 2 (not 2 x 62).
  EXPECT_EQ(h.s.stats().computed_tokens, 62 + 6);

  Harness other(c);  // a different prompt is admitted beside the first one's prefill
  other.Submit(1, RandomPrompt(rng, 60), 3);
  other.Step();
  other.Submit(2, RandomPrompt(rng, 60), 3);
  Plan both = other.Step();
  EXPECT_EQ(both.entries.size(), 2u);
  other.RunAll();

  Harness gone(c);  // the first request aborted: the waiting one computes the prefix itself
  gone.Submit(1, prompt, 3);
  gone.Step();
  gone.Submit(2, prompt, 3);
  EXPECT_EQ(gone.Step().entries.size(), 1u);
  ASSERT_TRUE(gone.s.Abort(1));
  gone.RunAll();
  EXPECT_EQ(gone.outputs[2], ReferenceOutput(prompt, 3, false));
  EXPECT_EQ(gone.finished[2].num_cached_tokens, 28);  // the 2 x 14 tokens request 1 inserted
}

TEST(Planner, SubmitRejectsRequestsThatCanNeverRun) {
  SchedulerConfig c = SmallConfig();
  c.max_context_tokens = 300;
  Scheduler s(c);
  EXPECT_THROW(s.Submit(1, SubmitParams{{}, 4, "", 0}), pg::Error);
  EXPECT_THROW(s.Submit(1, SubmitParams{{1, 2}, 0, "", 0}), pg::Error);
  try {
    s.Submit(1, SubmitParams{std::vector<int32_t>(299, 5), 4, "", 0});
    FAIL();
  } catch (const pg::Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
  }
  c.max_context_tokens = 0;
  Scheduler s2(c);
  try {  // 64 pages * 7 = 448 tokens
    s2.Submit(1, SubmitParams{std::vector<int32_t>(440, 5), 9, "", 0});
    FAIL();
  } catch (const pg::Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
  }
  s2.Submit(1, SubmitParams{{1, 2, 3}, 4, "", 0});
  EXPECT_THROW(s2.Submit(1, SubmitParams{{1, 2, 3}, 4, "", 0}), pg::Error);  // duplicate id
}

TEST(Planner, AdvanceRejectsResultsThatDoNotMatchThePlan) {
  Scheduler s(SmallConfig());
  s.Submit(1, SubmitParams{{1, 2, 3}, 4, "", 0});
  s.Submit(2, SubmitParams{{4, 5, 6}, 4, "", 0});
  EXPECT_THROW(s.Advance(StepResult{}, 0), pg::Error);  // no plan
  const Plan& p = s.NextPlan(0);
  ASSERT_EQ(p.entries.size(), 2u);
  EXPECT_THROW(s.NextPlan(1), pg::Error);  // Advance first
  EXPECT_THROW(s.Advance(StepResult{{{1, 7, false}}}, 1), pg::Error);                  // missing 2
  EXPECT_THROW(s.Advance(StepResult{{{1, 7, false}, {1, 8, false}}}, 1), pg::Error);   // dup
  EXPECT_THROW(s.Advance(StepResult{{{1, 7, false}, {9, 8, false}}}, 1), pg::Error);   // unknown
  s.Advance(StepResult{{{1, 7, false}, {2, 8, true}}}, 1);  // valid; 2 stops
  auto updates = s.TakeUpdates();
  ASSERT_EQ(updates.size(), 2u);
  EXPECT_FALSE(updates[0].finished);
  EXPECT_TRUE(updates[1].finished);
  EXPECT_EQ(updates[1].reason, FinishReason::kStop);
  s.CheckInvariants();
}

TEST(Planner, AbortQueuedRunningAndUnknown) {
  Harness h(SmallConfig());
  std::mt19937 rng(6);
  h.Submit(1, RandomPrompt(rng, 30), 50);
  h.Step();
  EXPECT_TRUE(h.s.Abort(1));  // running, no plan outstanding: finished at once
  h.s.Submit(2, SubmitParams{RandomPrompt(rng, 30), 50, "", 0});
  EXPECT_TRUE(h.s.Abort(2));  // queued
  EXPECT_FALSE(h.s.Abort(2));
  EXPECT_FALSE(h.s.Abort(77));
  auto updates = h.s.TakeUpdates();
  ASSERT_EQ(updates.size(), 2u);
  EXPECT_EQ(updates[0].reason, FinishReason::kAbort);
  EXPECT_EQ(updates[1].reason, FinishReason::kAbort);
  EXPECT_FALSE(h.s.HasWork());
  h.s.CheckInvariants();
  EXPECT_EQ(h.s.kv().num_available_pages(), 64);
  // Abort while its step is outstanding: finished after the step.
  h.Submit(3, RandomPrompt(rng, 10), 50);
  const Plan& p = h.s.NextPlan(h.now += 10);
  EXPECT_TRUE(h.s.Abort(3));
  h.s.Advance(h.exec.Run(p), h.now += 10);
  updates = h.s.TakeUpdates();
  ASSERT_EQ(updates.size(), 2u);  // its token, then the abort
  EXPECT_TRUE(updates[1].finished);
  EXPECT_EQ(updates[1].reason, FinishReason::kAbort);
  EXPECT_FALSE(h.s.HasWork());
}

TEST(Planner, PreemptionUnderKvPressureLowestRankGoesFirst) {
  SchedulerConfig c = SmallConfig();
  c.kv.num_device_pages = 12;  // 84 tokens for two requests of up to 60 tokens each
  c.kv.enable_prefix_cache = false;
  Harness h(c);
  std::mt19937 rng(7);
  auto a = RandomPrompt(rng, 20), b = RandomPrompt(rng, 20);
  h.Submit(1, a, 40);
  h.Submit(2, b, 40);
  bool saw_preempt = false;
  for (int i = 0; i < 2000 && h.s.HasWork(); ++i) {
    Plan p = h.Step();
    for (RequestId id : p.preempted) {
      EXPECT_EQ(id, 2u);  // 1 ranks higher (earlier arrival), never preempted
      saw_preempt = true;
    }
  }
  EXPECT_TRUE(saw_preempt);
  EXPECT_FALSE(h.s.HasWork());
  EXPECT_EQ(h.outputs[1], ReferenceOutput(a, 40, false));
  EXPECT_EQ(h.outputs[2], ReferenceOutput(b, 40, false));
  EXPECT_GT(h.s.stats().num_preemptions, 0);
}

TEST(Planner, PriorityDecidesTheVictim) {
  SchedulerConfig c = SmallConfig();
  c.kv.num_device_pages = 12;
  Harness h(c);
  std::mt19937 rng(8);
  h.Submit(1, RandomPrompt(rng, 20), 40, "", /*priority=*/0);
  h.Submit(2, RandomPrompt(rng, 20), 40, "", /*priority=*/5);
  for (int i = 0; i < 2000 && h.s.HasWork(); ++i) {
    Plan p = h.Step();
    for (RequestId id : p.preempted) EXPECT_EQ(id, 1u);
  }
  EXPECT_FALSE(h.s.HasWork());
}

TEST(Planner, SwapPreemptionEmitsOutThenInCopiesAndKeepsOutputs) {
  SchedulerConfig c = SmallConfig();
  c.kv.num_device_pages = 12;
  c.kv.num_host_pages = 20;
  c.kv.enable_prefix_cache = false;
  c.preemption = PreemptionMode::kSwap;
  Harness h(c);
  std::mt19937 rng(9);
  auto a = RandomPrompt(rng, 20), b = RandomPrompt(rng, 20);
  h.Submit(1, a, 40);
  h.Submit(2, b, 40);
  int d2h = 0, h2d = 0;
  for (int i = 0; i < 2000 && h.s.HasWork(); ++i) {
    Plan p = h.Step();
    for (auto& op : p.copies) (op.kind == cache::CopyKind::kDeviceToHost ? d2h : h2d)++;
  }
  EXPECT_FALSE(h.s.HasWork());
  EXPECT_GT(h.s.stats().num_swapped_out, 0);
  EXPECT_GT(d2h, 0);
  EXPECT_EQ(d2h, h2d);  // every swapped page came back
  EXPECT_EQ(h.outputs[1], ReferenceOutput(a, 40, false));
  EXPECT_EQ(h.outputs[2], ReferenceOutput(b, 40, false));
  EXPECT_EQ(h.exec.kv_errors, 0);
}

TEST(Planner, HybridModelReusesPrefixOnlyAtCheckpoints) {
  SchedulerConfig c = SmallConfig();
  c.state = StateCacheConfig{4, 16, 2};  // checkpoint every 2 pages (14 tokens)
  Harness h(c);
  std::mt19937 rng(10);
  auto prompt = RandomPrompt(rng, 45);
  h.Submit(1, prompt, 3);
  Plan first = h.Step();
  ASSERT_EQ(first.entries.size(), 1u);
  EXPECT_TRUE(first.entries[0].reset_state);
  ASSERT_EQ(first.entries[0].state_saves.size(), 3u);  // after 14, 28, 42 tokens
  EXPECT_EQ(first.entries[0].state_saves[2].num_tokens, 42);
  h.RunAll();
  // Same prompt + more: KV pages hit up to 6 pages (42 tokens): 42 is a checkpoint.
  auto p2 = prompt;
  p2.push_back(3);
  p2.push_back(4);
  h.Submit(2, p2, 3);
  Plan second = h.Step();
  ASSERT_EQ(second.entries.size(), 1u);
  EXPECT_EQ(second.entries[0].first_position, 42);
  EXPECT_FALSE(second.entries[0].reset_state);
  EXPECT_TRUE(second.entries[0].restore_checkpoint.has_value());
  h.RunAll();
  EXPECT_EQ(h.outputs[2], ReferenceOutput(p2, 3, false));
  // A prompt whose cached KV ends at 5 pages (35 tokens) falls back to the 28 checkpoint.
  auto p3 = std::vector<int32_t>(prompt.begin(), prompt.begin() + 36);
  h.Submit(3, p3, 2);
  Plan third = h.Step();
  EXPECT_EQ(third.entries[0].first_position, 28);
  h.RunAll();
  EXPECT_EQ(h.outputs[3], ReferenceOutput(p3, 2, false));
  EXPECT_EQ(h.exec.kv_errors, 0);
}

}  // namespace
}  // namespace pg::scheduler
