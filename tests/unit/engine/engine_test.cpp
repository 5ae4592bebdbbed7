// The engine loop on the embedded model: batching must not change results, the host tier
// must give back exactly what recomputation gives, and bad requests fail alone.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/json_mode.h"
#include "runtime/json_schema.h"
#include "engine/local_engine.h"
#include "engine/model_bundle.h"
#include "models/loader.h"
#include "kernels/registry.h"
#include "embedded_model_test.h"
#include "event_collector.h"

namespace pg::engine {
namespace {

using test_util::Collector;
using test_util::Result;

class EngineTest : public test_util::EmbeddedModelTest {};

const char* kTexts[] = {
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "<|im_start|>user\nWhat is 12 * 7?<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time, in a small village by the sea,",
    "List three colors:",
    "import numpy as np\nx = np.",
    "The quick brown fox",
    "Water boils at",
    "<|im_start|>user\nName a planet.<|im_end|>\n<|im_start|>assistant\n",
    "1, 2, 3, 4,",
    "In 1492, Columbus",
    "SELECT * FROM users WHERE",
};

TEST_F(EngineTest, ConcurrentRequestsGiveTheSameGreedyTokensAsAlone) {
  EngineConfig cfg;
  cfg.kv_cache_bytes = 64ll << 20;
  cfg.max_step_tokens = 64;        // forces chunked prefill mixed with decodes
  cfg.max_prefill_chunk_tokens = 7;
  std::vector<std::vector<int32_t>> alone;
  {
    LocalEngine e(*bundle_->model, bundle_->eos_ids, "test", cfg);
    for (const char* t : kTexts) alone.push_back(Run(e, Greedy(Prompt(t), 16)).tokens);
  }
  LocalEngine e(*bundle_->model, bundle_->eos_ids, "test", cfg);
  std::vector<std::unique_ptr<Collector>> cs;
  for (const char* t : kTexts) {
    cs.push_back(std::make_unique<Collector>());
    e.Submit(Greedy(Prompt(t), 16), cs.back()->Callback());
  }
  for (size_t i = 0; i < cs.size(); ++i) {
    Result r = cs[i]->Wait();
    EXPECT_EQ(r.tokens, alone[i]) << "request " << i << " (" << kTexts[i] << ")";
    EXPECT_FALSE(alone[i].empty());
  }
}

// JSON mode (response_format json_object) on the real model, greedy and seeded requests beside
// plain greedy ones. Each JSON request either stops (EOS, the only token once the object
// closes) on text that nlohmann::json parses as an object, or runs out of tokens on text that
// is a prefix of one (the tiny model sometimes repeats keys until the budget ends, as it would
// unconstrained); at least one must stop. The plain requests' tokens are those they get
// alone: the mask is the JSON row's own.
TEST_F(EngineTest, JsonModeEndsWithAnObjectAndLeavesOtherRowsAlone) {
  EngineConfig cfg;
  cfg.kv_cache_bytes = 64ll << 20;
  const auto table = MakeTokenTable(*bundle_->tokenizer, bundle_->eos_ids);
  const std::string system =
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n";
  const char* kJsonQuestions[] = {
      "Give me a JSON object describing a cat with name and age.",
      "What is the capital of France?",
      "List three colors.",
  };
  std::vector<std::vector<int32_t>> alone;
  {
    LocalEngine e(*bundle_->model, bundle_->eos_ids, "test", cfg);
    for (int i = 0; i < 4; ++i) alone.push_back(Run(e, Greedy(Prompt(kTexts[i]), 16)).tokens);
  }
  LocalEngine e(*bundle_->model, bundle_->eos_ids, "test", cfg);
  std::vector<std::unique_ptr<Collector>> plain, json;
  for (int i = 0; i < 4; ++i) {
    plain.push_back(std::make_unique<Collector>());
    e.Submit(Greedy(Prompt(kTexts[i]), 16), plain.back()->Callback());
  }
  constexpr int kMaxTokens = 160;
  for (const char* q : kJsonQuestions) {
    for (const float temperature : {0.0f, 0.8f}) {
      const std::string turn = "<|im_start|>user\n" + std::string(q) + "<|im_end|>\n<|im_start|>assistant\n";
      Request r = Greedy(Prompt(system + turn), kMaxTokens);
      r.sampling.temperature = temperature;
      r.sampling.seed = 7;
      r.sampling.token_table = table;
      json.push_back(std::make_unique<Collector>());
      e.Submit(std::move(r), json.back()->Callback());
    }
  }
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(plain[i]->Wait().tokens, alone[i]) << kTexts[i];
  int stopped = 0;
  for (size_t i = 0; i < json.size(); ++i) {
    const Result r = json[i]->Wait();
    const std::string text = bundle_->tokenizer->Decode(r.tokens, /*skip_special=*/true);
    SCOPED_TRACE(testing::Message() << "JSON request " << i << ": " << text);
    ASSERT_TRUE(r.reason == FinishReason::kStop || r.reason == FinishReason::kLength);
    if (r.reason == FinishReason::kStop) {
      ++stopped;
      EXPECT_TRUE(nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false).is_object());
    } else {
      EXPECT_EQ(int(r.tokens.size()), kMaxTokens);
      runtime::JsonMatcher m;
      EXPECT_TRUE(m.Accept(text)) << "not a prefix of a JSON object";
    }
  }
  EXPECT_GE(stopped, 1);
}

// logit_bias on the real model: -100 on the greedy first token moves the first token off it;
// +100 on one token makes greedy decoding repeat it; the other rows of the batch keep their
// tokens; an id outside the vocabulary is refused at Submit.
TEST_F(EngineTest, LogitBiasBansAndForcesTokens) {
  EngineConfig cfg;
  cfg.kv_cache_bytes = 64ll << 20;
  LocalEngine e(*bundle_->model, bundle_->eos_ids, "test", cfg);
  const auto prompt = Prompt(kTexts[0]);
  const std::vector<int32_t> base = Run(e, Greedy(prompt, 8)).tokens;
  ASSERT_EQ(base.size(), 8u);

  Request ban = Greedy(prompt, 8);
  ban.sampling.logit_bias = {{base[0], -100.0f}};
  const int32_t forced = Prompt(" banana").back();
  Request force = Greedy(Prompt(kTexts[1]), 6);
  force.sampling.logit_bias = {{forced, 100.0f}};
  Collector banned, forcing, plain;
  e.Submit(std::move(ban), banned.Callback());
  e.Submit(std::move(force), forcing.Callback());
  e.Submit(Greedy(prompt, 8), plain.Callback());
  EXPECT_NE(banned.Wait().tokens.at(0), base[0]);
  EXPECT_EQ(forcing.Wait().tokens, std::vector<int32_t>(6, forced));
  EXPECT_EQ(plain.Wait().tokens, base);

  Request bad = Greedy(prompt, 4);
  bad.sampling.logit_bias = {{int32_t(bundle_->model->config().vocab_size), 1.0f}};
  try {
    e.Submit(std::move(bad), [](const TokenEvent&) {});
    ADD_FAILURE() << "an id past the vocabulary was accepted";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(err.what()).find("logit_bias"), std::string::npos) << err.what();
  }
}

// Feeds `prefix` one single-byte token a byte, then checks the mask's indexes (the byte trie,
// the string fast paths) against Allowed() token by token on the real 49,152-token vocabulary.
void ExpectMaskExact(const tokenizer::Tokenizer& tok, const runtime::TokenTable& table,
                     runtime::OutputConstraint& c, const std::string& prefix) {
  SCOPED_TRACE(prefix);
  for (char ch : prefix) {
    const int32_t id = tok.FindToken(std::string(1, ch));
    ASSERT_GE(id, 0) << "no token for '" << ch << "'";
    ASSERT_TRUE(c.Allowed(id));
    c.Accept(id);
  }
  std::vector<float> logits(table.bytes.size(), 1.0f);
  c.Mask(logits);
  size_t kept = 0;
  for (size_t id = 0; id < logits.size(); ++id) {
    ASSERT_EQ(std::isfinite(logits[id]), c.Allowed(int32_t(id))) << "id " << id << " '" << table.bytes[id] << "'";
    kept += std::isfinite(logits[id]) ? 1 : 0;
  }
  EXPECT_GT(kept, 0u);
}

// In each kind of state a JSON output passes through.
TEST_F(EngineTest, JsonMaskEqualsTheTokenByTokenCheckOnTheRealVocabulary) {
  const auto table = MakeTokenTable(*bundle_->tokenizer, bundle_->eos_ids);
  for (const char* prefix : {"", " {", "{\"na", "{\"a\": ", "{\"a\": \"te", "{\"a\": \"x\\", "{\"a\": -1.5e",
                             "{\"a\": 12", "{\"a\": [tr", "{\"a\": {}}"}) {
    runtime::JsonConstraint c(table);
    ExpectMaskExact(*bundle_->tokenizer, *table, c, prefix);
  }
}

// The same for a schema: keys from a window of properties, an enum, a bounded string (whose
// plain tokens are kept by their length), an integer, nested objects in an array.
TEST_F(EngineTest, SchemaMaskEqualsTheTokenByTokenCheckOnTheRealVocabulary) {
  const auto table = MakeTokenTable(*bundle_->tokenizer, bundle_->eos_ids);
  const auto schema = runtime::JsonSchema::Compile(nlohmann::ordered_json::parse(R"({
      "type": "object", "properties": {
        "name": {"type": "string", "maxLength": 5}, "age": {"type": "integer"},
        "role": {"enum": ["admin", "user", 7]},
        "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}},
                  "required": ["sku"]}}},
      "required": ["name", "items"]})"));
  for (const char* prefix : {"", "{", "{\"na", "{\"name\": \"ab", "{\"name\": \"abcd", "{\"name\":\"a\", ",
                             "{\"name\":\"a\",\"age\": 1", "{\"name\":\"a\",\"role\":", "{\"name\":\"a\",\"role\":\"us",
                             "{\"name\":\"a\",\"items\":[{\"sku\":\"x", "{\"name\":\"a\",\"items\":[]}"}) {
    runtime::SchemaConstraint c(table, runtime::SchemaMatcher(*schema));
    ExpectMaskExact(*bundle_->tokenizer, *table, c, prefix);
  }
}

TEST_F(EngineTest, SecondTurnHitsThePrefixCacheAndMatchesRecompute) {
  EngineConfig cfg;
  cfg.kv_cache_bytes = 64ll << 20;
  LocalEngine e(*bundle_->model, bundle_->eos_ids, "test", cfg);
  std::vector<int32_t> turn1 = Prompt(std::string("<|im_start|>system\n") +
                                      std::string(400, 'x') + "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  Result r1 = Run(e, Greedy(turn1, 12, "conv"));
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), r1.tokens.begin(), r1.tokens.end());
  auto more = Prompt("<|im_end|>\n<|im_start|>user\nAnd again?<|im_end|>\n<|im_start|>assistant\n");
  turn2.insert(turn2.end(), more.begin(), more.end());
  Result r2 = Run(e, Greedy(turn2, 12, "conv"));
  // Every full page of turn 1 (prompt and generated tokens) is served from the cache.
  int full_pages_turn1 = int((turn1.size() + r1.tokens.size()) / 16);
  EXPECT_GE(r2.cached, (full_pages_turn1 - 1) * 16);
  LocalEngine fresh(*bundle_->model, bundle_->eos_ids, "test", cfg);
  Result r2_recompute = Run(fresh, Greedy(turn2, 12));
  EXPECT_EQ(r2_recompute.cached, 0);
  EXPECT_EQ(r2.tokens, r2_recompute.tokens);
}

TEST_F(EngineTest, HostTierLoadBackEqualsRecompute) {
  EngineConfig cfg;
  const int64_t page_bytes = bundle_->model->kv_spec().BytesPerToken(DType::kF32) * cfg.page_size;
  cfg.kv_cache_bytes = 40 * page_bytes;     // 640 tokens of device KV
  cfg.host_cache_bytes = 200 * page_bytes;  // evicted prefix pages go here
  cfg.session_ttl_ms = 0;
  LocalEngine e(*bundle_->model, bundle_->eos_ids, "test", cfg);
  std::vector<int32_t> a = Prompt(std::string("Document A: ") + std::string(1200, 'a'));
  a.resize(300);
  Result ra = Run(e, Greedy(a, 8));
  // Other requests push A's pages out of the device cache, into the host tier.
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> other = Prompt("Other document " + std::to_string(i) + ": " + std::string(1200, char('b' + i)));
    other.resize(300);
    Run(e, Greedy(other, 8));
  }
  std::vector<int32_t> a2 = a;
  a2.insert(a2.end(), ra.tokens.begin(), ra.tokens.end());
  auto q = Prompt(" What comes next?");
  a2.insert(a2.end(), q.begin(), q.end());
  Result hit = Run(e, Greedy(a2, 16));
  EXPECT_GE(hit.cached, 256) << "A's pages should come back from the host tier";
  const EngineStats st = e.Stats();
  EXPECT_EQ(st.kv_pages_total, 40);
  LocalEngine fresh(*bundle_->model, bundle_->eos_ids, "test", cfg);
  Result recompute = Run(fresh, Greedy(a2, 16));
  EXPECT_EQ(recompute.cached, 0);
  EXPECT_EQ(hit.tokens, recompute.tokens);
}

TEST_F(EngineTest, BadRequestsFailAloneWithClearErrors) {
  EngineConfig cfg;
  cfg.kv_cache_bytes = 32ll << 20;
  cfg.max_context_tokens = 256;
  LocalEngine e(*bundle_->model, bundle_->eos_ids, "test", cfg);
  try {
    e.Submit(Greedy(std::vector<int32_t>(300, 5), 4), [](const TokenEvent&) {});
    FAIL() << "an over-long prompt must be rejected";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::kOutOfRange);
    EXPECT_NE(std::string(err.what()).find("256"), std::string::npos) << err.what();
  }
  EXPECT_THROW(e.Submit(Greedy({}, 4), [](const TokenEvent&) {}), Error);
  EXPECT_THROW(e.Submit(Greedy({1, 2, 999999}, 4), [](const TokenEvent&) {}), Error);
  // The engine still serves a good request afterwards.
  Result ok = Run(e, Greedy(Prompt("The capital of France is"), 4));
  EXPECT_EQ(ok.reason, FinishReason::kLength);
  EXPECT_EQ(ok.tokens.size(), 4u);
}

TEST_F(EngineTest, AbortGivesOneFinalEventAndFreesPages) {
  EngineConfig cfg;
  cfg.kv_cache_bytes = 32ll << 20;
  LocalEngine e(*bundle_->model, bundle_->eos_ids, "test", cfg);
  Collector c;
  Request r = Greedy(Prompt("Count forever:"), 500);
  r.sampling.ignore_eos = true;
  RequestId id = e.Submit(std::move(r), c.Callback());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  e.Abort(id);
  Result res = c.Wait();
  EXPECT_EQ(res.reason, FinishReason::kAbort);
  EngineStats st = e.Stats();
  EXPECT_EQ(st.num_running, 0);
  EXPECT_EQ(st.kv_pages_free, st.kv_pages_total);
}

}  // namespace
}  // namespace pg::engine
