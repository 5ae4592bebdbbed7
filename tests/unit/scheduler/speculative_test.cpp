// Prompt-lookup drafts (ngram_proposer.h) and how the scheduler plans them (plan.h,
// PlanEntry::num_draft). The fake executor (fake_executor.h) verifies drafts as a real one
// does and checks every KV read, so these tests also prove rejected drafts' KV is never read.
#include <gtest/gtest.h>

#include <vector>

#include "core/status.h"
#include "unit/scheduler/fake_executor.h"

namespace pg::scheduler {
namespace {

using testing::Harness;
using testing::ReferenceOutput;

std::vector<int32_t> Propose(std::vector<int32_t> tokens, int32_t max_tokens, int32_t min_n = 1,
                             int32_t max_n = 3) {
  std::vector<int32_t> out = {-1};  // appended after what is there
  const SpeculativeConfig c{.num_draft_tokens = 8, .min_ngram = min_n, .max_ngram = max_n};
  const int32_t n = ProposeNgramDrafts(tokens, c, max_tokens, &out);
  EXPECT_EQ(size_t(n) + 1, out.size());
  return {out.begin() + 1, out.end()};
}

TEST(NgramProposer, LongestMatchThenLatestOccurrence) {
  // Suffix "1 2 3": its 3-gram occurs once (followed by 7 8); "2 3" occurs later (followed by
  // 9) but the longer match wins.
  EXPECT_EQ(Propose({1, 2, 3, 7, 8, 5, 2, 3, 9, 4, 1, 2, 3}, 4), (std::vector<int32_t>{7, 8, 5, 2}));
  // Two occurrences of the 3-gram: the latest one's continuation.
  EXPECT_EQ(Propose({1, 2, 3, 7, 1, 2, 3, 8, 1, 2, 3}, 2), (std::vector<int32_t>{8, 1}));
  // Only a 1-gram matches: allowed with min_n 1, refused with min_n 2.
  EXPECT_EQ(Propose({5, 6, 9, 5}, 2), (std::vector<int32_t>{6, 9}));
  EXPECT_EQ(Propose({4, 6, 9, 5, 6}, 3), (std::vector<int32_t>{9, 5, 6}));
  EXPECT_TRUE(Propose({4, 6, 9, 5, 6}, 3, /*min_n=*/2).empty());
}

TEST(NgramProposer, NeverPastTheEndOrTheCap) {
  // A period-2 sequence: the latest earlier match of "a b" ends two tokens back, so only two
  // tokens follow it.
  EXPECT_EQ(Propose({1, 2, 1, 2, 1, 2}, 5), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(Propose({1, 2, 3, 4, 5, 1, 2}, 1), (std::vector<int32_t>{3}));
  EXPECT_TRUE(Propose({1, 2, 3, 4, 5, 1, 2}, 0).empty());
  EXPECT_TRUE(Propose({7}, 3).empty());
  EXPECT_TRUE(Propose({}, 3).empty());
  EXPECT_TRUE(Propose({1, 2, 3, 4}, 3).empty());  // no repetition at all
}

TEST(NgramProposer, ConfigIsValidated) {
  EXPECT_THROW(ValidateSpeculativeConfig({.num_draft_tokens = -1}), Error);
  EXPECT_THROW(ValidateSpeculativeConfig({.num_draft_tokens = 65}), Error);
  EXPECT_THROW(ValidateSpeculativeConfig({.num_draft_tokens = 4, .min_ngram = 0}), Error);
  EXPECT_THROW(ValidateSpeculativeConfig({.num_draft_tokens = 4, .min_ngram = 3, .max_ngram = 2}), Error);
  EXPECT_NO_THROW(ValidateSpeculativeConfig({.num_draft_tokens = 4, .min_ngram = 1, .max_ngram = 1}));
}

SchedulerConfig SpecConfig(int32_t pages, int32_t drafts) {
  SchedulerConfig c;
  c.kv = cache::KvCacheConfig{4, pages, 0, true};
  c.max_step_tokens = 64;
  c.max_running_requests = 8;
  c.speculative = {.num_draft_tokens = drafts, .min_ngram = 1, .max_ngram = 3};
  return c;
}

// The fake's outputs (window 2) repeat, so drafts are proposed and mostly accepted: the
// request ends with its alone output, in fewer steps, and no entry's drafts could run past
// max_new_tokens if all were accepted.
TEST(SpeculativePlanner, DraftsShortenDecodingAndStayInsideMaxNewTokens) {
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6};
  int steps[2] = {0, 0};
  for (int32_t drafts : {0, 5}) {
    Harness h(SpecConfig(64, drafts), /*stops=*/false, /*window=*/2);
    h.Submit(1, prompt, 40);
    int generated = 0;
    while (h.s.HasWork()) {
      Plan p = h.Step();
      ++steps[drafts > 0];
      for (const PlanEntry& e : p.entries) {
        if (e.num_sample == 0) continue;
        EXPECT_LE(generated + e.num_draft + 1, 40) << "drafts past max_new_tokens";
        EXPECT_EQ(e.num_sample, 1 + e.num_draft);
        EXPECT_LE(e.num_draft, drafts);
      }
      generated = int(h.outputs[1].size());
    }
    EXPECT_EQ(h.outputs[1], ReferenceOutput(prompt, 40, false, 2)) << drafts << " drafts";
    EXPECT_EQ(h.exec.kv_errors, 0);
    if (drafts > 0) {
      EXPECT_GT(h.s.stats().accepted_draft_tokens, 0);
      EXPECT_EQ(h.s.stats().draft_tokens, h.exec.num_draft_tokens);
    }
  }
  EXPECT_LT(steps[1], steps[0]);
}

// With every page in use, drafts get no pages: they neither preempt the other request nor
// evict cached pages, and both requests still finish with their alone outputs.
TEST(SpeculativePlanner, DraftsNeverPreemptOrEvict) {
  const std::vector<int32_t> a = {1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1};  // 11 tokens
  const std::vector<int32_t> b = {5, 6, 5, 6, 5, 6, 5, 6, 5, 6, 5};
  // Each needs 11 + 9 = 20 tokens = 5 pages of 4; the pool holds exactly 10.
  Harness h(SpecConfig(10, 6), false, 2);
  h.Submit(1, a, 9);
  h.Submit(2, b, 9);
  h.RunAll();
  EXPECT_EQ(h.s.stats().num_preemptions, 0);
  EXPECT_EQ(h.outputs[1], ReferenceOutput(a, 9, false, 2));
  EXPECT_EQ(h.outputs[2], ReferenceOutput(b, 9, false, 2));
  EXPECT_EQ(h.exec.kv_errors, 0);
}

TEST(SpeculativePlanner, RefusedForHybridModels) {
  SchedulerConfig c = SpecConfig(32, 4);
  c.state = StateCacheConfig{4, 16, 1};
  EXPECT_THROW(Scheduler s(c), Error);
}

}  // namespace
}  // namespace pg::scheduler
