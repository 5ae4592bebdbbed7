// Speculative decoding (prompt-lookup drafts, scheduler/ngram_proposer.h) on the embedded
// model. The oracle is the same engine without drafts: verification samples each position with
// the request's own sampler and CPU kernels are batch invariant (docs/design/engine.md), so
// tokens, logprobs and finish reasons must be identical, greedy or seeded, with penalties,
// stop tokens, JSON mode and several requests at once; and the drafts must actually be
// accepted (else the comparison proves nothing).
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/json_mode.h"
#include "engine/local_engine.h"
#include "engine/model_bundle.h"
#include "embedded_model_test.h"
#include "event_collector.h"
#include "models/loader.h"

namespace pg::engine {
namespace {

using test_util::Result;

// Prompts whose continuations repeat their context (what prompt lookup is for) and some that
// do not.
const char* kPrompts[] = {
    "<|im_start|>user\nRepeat this sentence exactly: The quick brown fox jumps over the lazy dog "
    "near the river bank.<|im_end|>\n<|im_start|>assistant\n",
    "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n",
    "<ul>\n  <li>apple</li>\n  <li>pear</li>\n  <li>plum</li>\n  <li>",
    "Once upon a time, in a small village by the sea,",
    "1, 2, 3, 4,",
    "<|im_start|>user\nWhat is 12 * 7?<|im_end|>\n<|im_start|>assistant\n",
};

class SpeculativeTest : public test_util::EmbeddedModelTest {
 protected:
  // Runs `requests` at once on an engine with `drafts` draft tokens (0 = off); returns their
  // results and the engine's counters.
  static std::vector<Result> RunAll(const std::vector<Request>& requests, int drafts,
                                    EngineStats* stats = nullptr, int max_step_tokens = 2048) {
    EngineConfig cfg;
    cfg.kv_cache_bytes = 64ll << 20;
    cfg.max_step_tokens = max_step_tokens;
    cfg.speculative = {.num_draft_tokens = drafts, .min_ngram = 1, .max_ngram = 4};
    LocalEngine e(*bundle_->model, bundle_->eos_ids, "test", cfg);
    std::vector<Result> out = test_util::RunAll(e, requests);
    if (stats != nullptr) *stats = e.Stats();
    return out;
  }
  static void ExpectSame(const std::vector<Result>& plain, const std::vector<Result>& spec) {
    ASSERT_EQ(plain.size(), spec.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      SCOPED_TRACE(testing::Message() << "request " << i);
      EXPECT_EQ(spec[i].tokens, plain[i].tokens);
      EXPECT_EQ(spec[i].reason, plain[i].reason);
      EXPECT_TRUE(spec[i].error.empty()) << spec[i].error;
      ASSERT_EQ(spec[i].logprobs.size(), plain[i].logprobs.size());
      for (size_t t = 0; t < plain[i].logprobs.size(); ++t) {
        EXPECT_EQ(spec[i].logprobs[t].token, plain[i].logprobs[t].token);
        EXPECT_EQ(spec[i].logprobs[t].logprob, plain[i].logprobs[t].logprob) << "token " << t;
        EXPECT_EQ(spec[i].logprobs[t].top, plain[i].logprobs[t].top) << "token " << t;
      }
    }
  }
};

Request Make(std::vector<int32_t> prompt, int max_tokens, float temperature) {
  Request r;
  r.prompt_tokens = std::move(prompt);
  r.sampling.temperature = temperature;
  r.sampling.max_tokens = max_tokens;
  return r;
}

TEST_F(SpeculativeTest, GreedyTokensAndLogprobsEqualPlainDecoding) {
  std::vector<Request> rs;
  for (const char* p : kPrompts) {
    rs.push_back(Make(Prompt(p), 48, 0.0f));
    rs.back().sampling.top_logprobs = 3;
  }
  EngineStats st;
  const auto plain = RunAll(rs, 0);
  const auto spec = RunAll(rs, 5, &st);
  ExpectSame(plain, spec);
  EXPECT_GT(st.spec_accepted_tokens, 20) << st.spec_draft_tokens << " drafts";
  EXPECT_LT(st.spec_accepted_tokens, st.spec_draft_tokens);
  RecordProperty("accepted", std::to_string(st.spec_accepted_tokens) + "/" +
                                 std::to_string(st.spec_draft_tokens));
}

TEST_F(SpeculativeTest, SeededSamplingWithPenaltiesEqualsPlainDecoding) {
  std::vector<Request> rs;
  for (const char* p : kPrompts) {
    for (float t : {0.7f, 1.0f}) {
      Request r = Make(Prompt(p), 40, t);
      r.sampling.seed = 11;
      r.sampling.top_p = 0.95f;
      r.sampling.top_k = 40;
      r.sampling.frequency_penalty = 0.2f;
      r.sampling.repetition_penalty = 1.05f;
      r.sampling.top_logprobs = 0;
      rs.push_back(std::move(r));
    }
  }
  EngineStats st;
  const auto plain = RunAll(rs, 0);
  const auto spec = RunAll(rs, 4, &st, /*max_step_tokens=*/24);  // a tight budget too
  ExpectSame(plain, spec);
  EXPECT_GT(st.spec_accepted_tokens, 0) << st.spec_draft_tokens << " drafts";
}

// A stop token inside an accepted run of drafts ends the output there, as it does without
// drafts; max_tokens never overshoots.
TEST_F(SpeculativeTest, StopTokensAndLengthEndWhereThePlainRunEnds) {
  std::vector<Request> probe;
  for (const char* p : kPrompts) probe.push_back(Make(Prompt(p), 48, 0.0f));
  const auto free_run = RunAll(probe, 0);
  std::vector<Request> rs;
  for (size_t i = 0; i < probe.size(); ++i) {
    for (int max_tokens : {7, 13, 48}) {
      Request r = probe[i];
      r.sampling.max_tokens = max_tokens;
      // A token of the free run's second half becomes a stop token.
      const auto& toks = free_run[i].tokens;
      if (toks.size() > 8) r.sampling.stop_token_ids = {toks[toks.size() / 2 + i % 3]};
      rs.push_back(std::move(r));
    }
  }
  EngineStats st;
  const auto plain = RunAll(rs, 0);
  const auto spec = RunAll(rs, 6, &st);
  ExpectSame(plain, spec);
  for (size_t i = 0; i < rs.size(); ++i)
    EXPECT_LE(int(spec[i].tokens.size()), rs[i].sampling.max_tokens);
  EXPECT_GT(st.spec_accepted_tokens, 0);
}

TEST_F(SpeculativeTest, JsonModeEqualsPlainDecoding) {
  const auto table = MakeTokenTable(*bundle_->tokenizer, bundle_->eos_ids);
  std::vector<Request> rs;
  for (float t : {0.0f, 0.8f}) {
    Request r = Make(Prompt("<|im_start|>user\nGive me a JSON object describing a cat with name "
                            "and age.<|im_end|>\n<|im_start|>assistant\n"),
                     96, t);
    r.sampling.seed = 3;
    r.sampling.token_table = table;
    rs.push_back(std::move(r));
  }
  const auto plain = RunAll(rs, 0);
  const auto spec = RunAll(rs, 4);
  ExpectSame(plain, spec);
}

}  // namespace
}  // namespace pg::engine
