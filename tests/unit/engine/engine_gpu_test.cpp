// The engine on the GPU (CUDA builds; runs on the GPU machine): the CUDA step executor
// (engine/cuda/cuda_executor.h) against the CPU engine, same requests, tests/data tiny
// models. Oracle: the CPU engine (f32 host forward; its batching invariance and host tier are
// held by engine_test.cpp). Greedy tokens must be identical up to the first difference, and
// a difference is allowed only at a near-tie of the host model's f32 logits at that step:
// top-1 minus the GPU's token's logit below twice the logit tolerance the GPU goldens hold
// these models to (tests/models/gpu_model_test.cpp: max|diff| <= 0.05 std(logits) for up to 3
// layers, x sqrt(layers / 3) deeper), i.e. a choice bf16 rounding may flip.
#include <execinfo.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "core/status.h"
#include "engine/cuda/cuda_executor.h"
#include "engine/local_engine.h"
#include "runtime/json_constraint.h"
#include "runtime/grammar.h"
#include "runtime/json_schema.h"
#include "unit/runtime/json_gbnf.h"
#include "runtime/regex_constraint.h"
#include "kernels/cuda/common/context.h"
#include "models/loader.h"
#include "runtime/sequence_runner.h"
#include "event_collector.h"

namespace pg::engine {
namespace {

// A crash on the GPU machine prints its stack (offsets into the binary, for addr2line on the
// unstripped build here).
void OnFatalSignal(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  const char msg[] = "fatal signal; backtrace:\n";
  (void)!write(2, msg, sizeof msg - 1);
  backtrace_symbols_fd(frames, n, 2);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}
const bool kSignalsInstalled = [] {
  std::signal(SIGSEGV, OnFatalSignal);
  std::signal(SIGABRT, OnFatalSignal);
  std::signal(SIGBUS, OnFatalSignal);
  return true;
}();

constexpr int kContext = 512;
constexpr float kShallowTol = 0.05f;
constexpr float kRoutingTie = 0.01f;

using test_util::Collector;
using test_util::Result;

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(3 + rng() % uint32_t(vocab - 3));  // no bos / eos ids
  return t;
}

Request Greedy(std::vector<int32_t> prompt, int max_tokens) {
  Request r;
  r.prompt_tokens = std::move(prompt);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

EngineConfig SmallConfig() {
  EngineConfig c;
  c.page_size = 16;
  c.kv_cache_bytes = 64ll << 20;
  c.max_step_tokens = 160;
  c.max_prefill_chunk_tokens = 37;  // awkward: prompts span chunks and partial pages
  c.max_running_requests = 6;
  c.max_context_tokens = kContext;
  return c;
}

struct GpuEngine {
  cuda::CudaStepExecutor* exec = nullptr;  // owned by the engine
  std::unique_ptr<LocalEngine> engine;
};

GpuEngine MakeGpuEngine(const std::string& path, EngineConfig c, int64_t max_pages = 0,
                        bool graphs = true) {
  cuda::CudaExecutorOptions o;
  o.gpu_memory_utilization = 0.3;
  o.page_size = c.page_size;
  o.max_step_tokens = c.max_step_tokens;
  o.max_running = c.max_running_requests;
  o.host_cache_bytes = c.host_cache_bytes;
  o.max_kv_pages = max_pages;
  o.graphs = graphs;
  std::fprintf(stderr, "[gpu engine] runner\n");
  auto exec = std::make_unique<cuda::CudaStepExecutor>(o);
  std::fprintf(stderr, "[gpu engine] load + place %s\n", path.c_str());
  auto model = exec->LoadModel({.path = path});
  const int context = c.ContextFor(model->config());
  std::fprintf(stderr, "[gpu engine] attach (context %d)\n", context);
  exec->Attach(std::move(model), context);
  std::fprintf(stderr, "[gpu engine] ready\n");
  GpuEngine g;
  g.exec = exec.get();
  std::vector<int32_t> eos = g.exec->model_config().eos_token_ids;
  g.engine = std::make_unique<LocalEngine>(std::move(exec), eos, "gpu", c);
  return g;
}

using test_util::RunAll;

// Text of one JSON object (RFC 8259). nlohmann::json is the oracle, except that it refuses
// numbers beyond a double's range (out_of_range 406, e.g. 3318E61219), which the RFC's
// grammar allows and JSON mode therefore may produce: such text is checked against the JSON
// grammar (runtime/grammar.h, code independent of JSON mode's matcher) instead.
bool IsJsonObjectText(const std::string& text) {
  try {
    return nlohmann::json::parse(text).is_object();
  } catch (const nlohmann::json::out_of_range&) {
    runtime::GrammarMatcher m(runtime::Grammar::Compile(runtime::kJsonGbnf));
    for (char ch : text)
      if (!m.Accept(uint8_t(ch))) return false;
    return m.can_end() && text.find_first_not_of(" \t\n\r") != std::string::npos &&
           text[text.find_first_not_of(" \t\n\r")] == '{';
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

class EngineGpuTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_GT(pg::cuda::DeviceCount(), 0) << "no CUDA device: this test runs on the GPU machine";
    path_ = "tests/data/models/" + GetParam();
    host_ = models::LoadModel({.path = path_});
    vocab_ = host_->config().vocab_size;
    tie_scale_ = 2.0 * kShallowTol * std::sqrt(std::max(host_->config().num_layers, 3) / 3.0);
  }

  // GPU tokens equal the CPU's up to the first difference, which must be at a near-tie of
  // the host model's f32 logits. Returns the index of the first difference (size if none).
  size_t ExpectSameGreedy(const Request& r, const Result& cpu, const Result& gpu,
                          const std::string& what) {
    EXPECT_EQ(cpu.error, "") << what;
    EXPECT_EQ(gpu.error, "") << what;
    EXPECT_EQ(gpu.reason, cpu.reason) << what;
    EXPECT_EQ(gpu.tokens.size(), cpu.tokens.size()) << what;
    size_t d = 0;
    while (d < cpu.tokens.size() && d < gpu.tokens.size() && cpu.tokens[d] == gpu.tokens[d]) ++d;
    if (d < cpu.tokens.size() && d < gpu.tokens.size()) {
      runtime::SequenceRunner seq(*host_, {.max_context = kContext, .page_size = 16,
                                           .prefill_chunk = 64});
      std::vector<int32_t> ctx = r.prompt_tokens;
      ctx.insert(ctx.end(), cpu.tokens.begin(), cpu.tokens.begin() + std::ptrdiff_t(d));
      std::span<float> l = seq.Append(ctx);
      double mean = 0, var = 0;
      for (float v : l) mean += v;
      mean /= double(l.size());
      for (float v : l) var += (v - mean) * (v - mean);
      const double tie = tie_scale_ * std::sqrt(var / double(l.size()));
      const double margin = double(l[size_t(cpu.tokens[d])]) - double(l[size_t(gpu.tokens[d])]);
      // MoE models: an expert choice of this token within kRoutingTie of flipping under bf16
      // is a routing near-tie (as in gpu_model_test.cpp).
      const float routing = host_->last_routing_margin();
      EXPECT_TRUE(margin < tie || routing < kRoutingTie)
          << what << ": GPU token " << gpu.tokens[d] << " differs from the CPU's " << cpu.tokens[d]
          << " at step " << d << " with f32 margin " << margin << " (near-tie " << tie
          << "), routing margin " << routing;
      std::printf("  %s: first difference at step %zu of %zu: f32 margin %.5f (near-tie %.5f), "
                  "routing margin %.4f\n",
                  what.c_str(), d, cpu.tokens.size(), margin, tie, routing);
    }
    return d;
  }

  std::string path_;
  std::unique_ptr<models::Model> host_;
  int vocab_ = 0;
  double tie_scale_ = 0;
};

TEST_P(EngineGpuTest, ConcurrentChunkedRequestsMatchTheCpuEngine) {
  for (bool graphs : {true, false}) {
    std::vector<Request> reqs;
    const int lens[] = {5, 37, 38, 90, 150, 16};
    for (int i = 0; i < 6; ++i) reqs.push_back(Greedy(RandomTokens(lens[i], vocab_, 100 + i), 24));
    LocalEngine cpu(*host_, host_->config().eos_token_ids, "cpu", SmallConfig());
    GpuEngine gpu = MakeGpuEngine(path_, SmallConfig(), 0, graphs);
    const std::vector<Result> a = RunAll(cpu, reqs);
    const std::vector<Result> b = RunAll(*gpu.engine, reqs);
    size_t same = 0, total = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      same += ExpectSameGreedy(reqs[i], a[i], b[i],
                               GetParam() + (graphs ? " graphs" : " eager") + " request " + std::to_string(i));
      total += a[i].tokens.size();
    }
    if (graphs) {
      EXPECT_GT(gpu.exec->graph_steps(), 0);
    } else {
      EXPECT_EQ(gpu.exec->graph_steps(), 0);
    }
    std::printf("%s (%s): %zu / %zu greedy tokens identical before any difference; %lld graph "
                "steps, %lld eager steps\n",
                GetParam().c_str(), graphs ? "graphs" : "eager", same, total,
                (long long)gpu.exec->graph_steps(), (long long)gpu.exec->eager_steps());
  }
}

TEST_P(EngineGpuTest, SharedPrefixHitsTheCacheAndMatches) {
  LocalEngine cpu(*host_, host_->config().eos_token_ids, "cpu", SmallConfig());
  GpuEngine gpu = MakeGpuEngine(path_, SmallConfig());
  const std::vector<int32_t> prefix = RandomTokens(70, vocab_, 7);
  auto with_tail = [&](uint32_t seed, int n) {
    std::vector<int32_t> p = prefix;
    std::vector<int32_t> t = RandomTokens(n, vocab_, seed);
    p.insert(p.end(), t.begin(), t.end());
    return Greedy(p, 16);
  };
  const Request first = with_tail(1, 9);
  const std::vector<Request> next = {with_tail(2, 20), with_tail(3, 3), with_tail(4, 45)};
  const Result a0 = RunAll(cpu, {first})[0], b0 = RunAll(*gpu.engine, {first})[0];
  ExpectSameGreedy(first, a0, b0, GetParam() + " prefix first");
  const std::vector<Result> a = RunAll(cpu, next), b = RunAll(*gpu.engine, next);
  for (size_t i = 0; i < next.size(); ++i) {
    EXPECT_GE(b[i].cached, 64) << "request " << i << " should reuse the 4 full prefix pages";
    EXPECT_EQ(b[i].cached, a[i].cached);
    ExpectSameGreedy(next[i], a[i], b[i], GetParam() + " prefix " + std::to_string(i));
  }
}

TEST_P(EngineGpuTest, HostTierSwapMatchesTheCpuEngine) {
  // 28 device pages for 4 requests of ~120 tokens + 40 generated (10-11 pages each): the
  // scheduler preempts by swapping to the host tier and loads the pages back.
  EngineConfig c = SmallConfig();
  c.host_cache_bytes = 64ll << 20;
  std::vector<Request> reqs;
  for (int i = 0; i < 4; ++i) reqs.push_back(Greedy(RandomTokens(110 + 7 * i, vocab_, 300 + i), 40));
  LocalEngine cpu(*host_, host_->config().eos_token_ids, "cpu", SmallConfig());
  GpuEngine gpu = MakeGpuEngine(path_, c, /*max_pages=*/28);
  ASSERT_EQ(gpu.engine->num_kv_pages(), 28);
  const std::vector<Result> a = RunAll(cpu, reqs), b = RunAll(*gpu.engine, reqs);
  for (size_t i = 0; i < reqs.size(); ++i)
    ExpectSameGreedy(reqs[i], a[i], b[i], GetParam() + " swap " + std::to_string(i));
  EXPECT_EQ(gpu.engine->Stats().kv_pages_free, 28);
}

TEST_P(EngineGpuTest, AbortTooLongAndTooBigFailAlone) {
  EngineConfig c = SmallConfig();
  GpuEngine gpu = MakeGpuEngine(path_, c, /*max_pages=*/20);  // 320 tokens of KV
  // Over-long prompt: rejected synchronously, no callback.
  try {
    gpu.engine->Submit(Greedy(RandomTokens(kContext, vocab_, 1), 4), [](const TokenEvent&) {
      ADD_FAILURE() << "callback of a rejected request";
    });
    ADD_FAILURE() << "an over-long prompt was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfRange) << e.what();
  }
  // Cannot fit the KV pool (300 + 100 tokens > 20 pages): rejected alone.
  try {
    gpu.engine->Submit(Greedy(RandomTokens(300, vocab_, 2), 100), [](const TokenEvent&) {
      ADD_FAILURE() << "callback of a rejected request";
    });
    ADD_FAILURE() << "a request larger than the KV pool was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted) << e.what();
  }
  // Abort mid-generation while another request runs to completion.
  Collector long_c, ok_c;
  const RequestId id = gpu.engine->Submit(Greedy(RandomTokens(20, vocab_, 3), 200), long_c.Callback());
  gpu.engine->Submit(Greedy(RandomTokens(30, vocab_, 4), 12), ok_c.Callback());
  long_c.WaitFirst();
  gpu.engine->Abort(id);
  const Result aborted = long_c.Wait(), ok = ok_c.Wait();
  EXPECT_EQ(aborted.reason, FinishReason::kAbort);
  EXPECT_LT(aborted.tokens.size(), 200u);
  EXPECT_EQ(ok.reason, FinishReason::kLength);
  EXPECT_EQ(ok.tokens.size(), 12u);
  EXPECT_EQ(gpu.engine->Stats().kv_pages_free, 20);
}

TEST_P(EngineGpuTest, SeededSamplingPenaltiesAndLogprobs) {
  GpuEngine gpu = MakeGpuEngine(path_, SmallConfig());
  auto sampled = [&](float rep, int top_logprobs) {
    Request r = Greedy(RandomTokens(40, vocab_, 9), 20);
    r.sampling.temperature = 0.9f;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = 1234;
    r.sampling.repetition_penalty = rep;
    r.sampling.frequency_penalty = rep != 1.0f ? 0.5f : 0.0f;
    r.sampling.top_logprobs = top_logprobs;
    return r;
  };
  // Device sampling (with and without device penalty rows): same seed, same tokens.
  for (float rep : {1.0f, 1.3f}) {
    const std::vector<Result> x = RunAll(*gpu.engine, {sampled(rep, -1), sampled(rep, -1)});
    EXPECT_EQ(x[0].tokens, x[1].tokens) << "repetition penalty " << rep;
    EXPECT_EQ(x[0].tokens.size(), 20u);
  }
  // Chosen-token logprobs from the device; top alternatives through the host (logits row).
  for (int top : {0, 3}) {
    const Result r = RunAll(*gpu.engine, {sampled(1.0f, top)})[0];
    ASSERT_EQ(r.logprobs.size(), r.tokens.size());
    for (size_t i = 0; i < r.tokens.size(); ++i) {
      EXPECT_EQ(r.logprobs[i].token, r.tokens[i]);
      EXPECT_LE(r.logprobs[i].logprob, 0.0f);
      EXPECT_EQ(int(r.logprobs[i].top.size()), top);
      if (top > 0) {
        EXPECT_GE(r.logprobs[i].top[0].second, r.logprobs[i].logprob - 1e-5f);
      }
    }
  }
  // The seeded stream is the host sampler's: compare with the CPU engine where the logits
  // agree (report only: bf16 logits may move a draw across a boundary).
  LocalEngine cpu(*host_, host_->config().eos_token_ids, "cpu", SmallConfig());
  const Result a = RunAll(cpu, {sampled(1.0f, -1)})[0];
  const Result b = RunAll(*gpu.engine, {sampled(1.0f, -1)})[0];
  size_t d = 0;
  while (d < a.tokens.size() && d < b.tokens.size() && a.tokens[d] == b.tokens[d]) ++d;
  std::printf("%s: seeded sampling (T 0.9, top-p 0.95): CPU and GPU engines agree for %zu/%zu tokens\n",
              GetParam().c_str(), d, a.tokens.size());
}

// JSON mode through the CUDA executor's host-sampled rows. The tiny models have no tokenizer,
// so a synthetic table spells each id as one byte of a JSON alphabet (the EOS ids special).
// Every output, CPU or GPU engine, greedy or seeded, is a JSON object that stops, or a prefix
// of one that ran out of tokens; agreement of the two engines' tokens is reported.
TEST_P(EngineGpuTest, JsonModeOnTheHostPath) {
  const std::vector<int32_t> eos = host_->config().eos_token_ids;
  ASSERT_FALSE(eos.empty());
  const std::string alphabet = "{}[]\":, 0123456789abcdef-.eE\n";
  std::vector<std::string> bytes(static_cast<size_t>(vocab_));
  std::vector<uint8_t> special(static_cast<size_t>(vocab_), 0);
  for (int i = 0; i < vocab_; ++i) bytes[size_t(i)] = std::string(1, alphabet[size_t(i) % alphabet.size()]);
  for (int32_t e : eos) special[size_t(e)] = 1;
  const auto table = std::make_shared<const runtime::TokenTable>(
      runtime::TokenTable::Make(std::move(bytes), std::move(special), eos));
  auto json_request = [&](float temperature, uint32_t seed) {
    Request r = Greedy(RandomTokens(30, vocab_, seed), 48);
    r.sampling.ignore_eos = false;
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    r.sampling.token_table = table;
    return r;
  };
  // Row 3: a schema, {"a": [integers]} (the alphabet spells it).
  Request schema_row = json_request(0.8f, 14);
  schema_row.sampling.json_schema = runtime::JsonSchema::Compile(nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}, "required": ["a"]})"));
  // Row 4: a guided regex (the alphabet spells it), sampled; row 5: a string with a pattern
  // (its key, too, is spelled by the alphabet).
  Request regex_row = json_request(0.8f, 15);
  regex_row.sampling.regex = runtime::Regex::Compile("[0-9a-f]{4}-[0-9a-f]{4}(-[0-9a-f]{2,4}){0,3}",
                                                     runtime::Regex::Anchoring::kFullMatch);
  Request pattern_row = json_request(0.8f, 16);
  pattern_row.sampling.json_schema = runtime::JsonSchema::Compile(nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"d": {"type": "string", "pattern": "^[a-f]{2,6}-[0-9]{1,3}$"}}, "required": ["d"]})"));
  // Row 6: a GBNF grammar (regular, so std::regex is its oracle below).
  Request grammar_row = json_request(0.8f, 17);
  grammar_row.sampling.grammar = runtime::Grammar::Compile("root ::= item (\"-\" item){0,3}\nitem ::= [0-9a-f]{2,4}");
  const std::vector<Request> reqs = {json_request(0.0f, 11), json_request(0.8f, 12),
                                     Greedy(RandomTokens(25, vocab_, 13), 16), schema_row, regex_row, pattern_row,
                                     grammar_row};
  GpuEngine gpu = MakeGpuEngine(path_, SmallConfig());
  LocalEngine cpu(*host_, eos, "cpu", SmallConfig());
  const std::vector<Result> a = RunAll(cpu, reqs), b = RunAll(*gpu.engine, reqs);
  auto TextOf = [&](const Result& r) {
    std::string text;
    for (int32_t t : r.tokens) text += table->bytes[size_t(t)];
    return text;
  };
  ExpectSameGreedy(reqs[2], a[2], b[2], GetParam() + " plain row beside JSON rows");
  for (const Result* r : {&a[3], &b[3]}) {
    const std::string text = TextOf(*r);
    SCOPED_TRACE(GetParam() + " schema row: " + text);
    ASSERT_EQ(r->error, "");
    runtime::SchemaMatcher m(*schema_row.sampling.json_schema);
    EXPECT_TRUE(m.Accept(text)) << "not a prefix of an instance";
    if (r->reason == FinishReason::kStop) {
      const auto v = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      ASSERT_TRUE(v.is_object() && v.size() == 1 && v.contains("a") && v["a"].is_array());
      for (const auto& x : v["a"]) EXPECT_TRUE(x.is_number_integer()) << x.dump();
    }
  }
  for (const Result* r : {&a[4], &b[4]}) {  // a prefix of a match; a match where it stopped
    const std::string text = TextOf(*r);
    SCOPED_TRACE(GetParam() + " regex row: " + text);
    ASSERT_EQ(r->error, "");
    runtime::RegexMatcher m(*regex_row.sampling.regex);
    bool prefix = true;
    for (char ch : text) prefix = prefix && m.Accept(uint8_t(ch));
    EXPECT_TRUE(prefix);
    if (r->reason == FinishReason::kStop) {
      EXPECT_TRUE(regex_row.sampling.regex->FullMatch(text));
    }
  }
  for (const Result* r : {&a[5], &b[5]}) {
    const std::string text = TextOf(*r);
    SCOPED_TRACE(GetParam() + " pattern row: " + text);
    ASSERT_EQ(r->error, "");
    runtime::SchemaMatcher m(*pattern_row.sampling.json_schema);
    EXPECT_TRUE(m.Accept(text)) << "not a prefix of an instance";
    if (r->reason == FinishReason::kStop) {
      const auto v = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      ASSERT_TRUE(v.is_object() && v.contains("d") && v["d"].is_string());
      EXPECT_TRUE(std::regex_match(v["d"].get<std::string>(), std::regex("^[a-f]{2,6}-[0-9]{1,3}$")));
    }
  }
  for (const Result* r : {&a[6], &b[6]}) {
    const std::string text = TextOf(*r);
    SCOPED_TRACE(GetParam() + " grammar row: " + text);
    ASSERT_EQ(r->error, "");
    const std::regex sentence("[0-9a-f]{2,4}(-[0-9a-f]{2,4}){0,3}");
    if (r->reason == FinishReason::kStop) {
      EXPECT_TRUE(std::regex_match(text, sentence));
    } else {  // a prefix of a sentence: some completion of it matches
      EXPECT_TRUE(std::regex_match(text + "00", sentence) || std::regex_match(text + "0", sentence) ||
                  std::regex_match(text, sentence));
    }
  }
  for (size_t i = 0; i < 2; ++i) {
    for (const Result* r : {&a[i], &b[i]}) {
      const std::string text = TextOf(*r);
      SCOPED_TRACE(GetParam() + " JSON request " + std::to_string(i) + ": " + text);
      ASSERT_EQ(r->error, "");
      std::string ids, shown;
      for (size_t k = 0; k < r->tokens.size() && k < 48; ++k) ids += " " + std::to_string(r->tokens[k]);
      for (char ch : text) shown += ch == '\n' ? std::string("\\n") : std::string(1, ch);
      // Replayed through a fresh JSON-mode constraint: the first token it refuses, if any (the
      // engine must only deliver tokens its constraint accepted).
      auto replay = runtime::MakeOutputConstraint(table, nullptr);
      std::string refused = "none";
      for (size_t k = 0; k < r->tokens.size(); ++k) {
        if (!replay->Allowed(r->tokens[k])) {
          refused = "token " + std::to_string(k) + " (id " + std::to_string(r->tokens[k]) + ")";
          break;
        }
        replay->Accept(r->tokens[k]);
      }
      SCOPED_TRACE(std::string(r == &a[i] ? "CPU" : "GPU") + " engine, reason " + FinishReasonName(r->reason) +
                   ", " + std::to_string(r->tokens.size()) + " tokens:" + ids + " text [" + shown +
                   "], first refused on replay: " + refused);
      EXPECT_EQ(refused, "none");
      if (r->reason == FinishReason::kStop) {
        EXPECT_TRUE(IsJsonObjectText(text));
      } else {
        EXPECT_EQ(r->reason, FinishReason::kLength);
        runtime::JsonMatcher m;
        EXPECT_TRUE(m.Accept(text));
      }
    }
    size_t d = 0;
    while (d < a[i].tokens.size() && d < b[i].tokens.size() && a[i].tokens[d] == b[i].tokens[d]) ++d;
    std::printf("%s: JSON mode request %zu: CPU and GPU engines agree for %zu/%zu tokens\n", GetParam().c_str(),
                i, d, a[i].tokens.size());
  }
}

// logit_bias rows are sampled on the host: +100 on one id makes greedy decoding repeat it on
// both engines; -100 on the unbiased greedy first token moves the first token off it; a plain
// row beside them keeps the CPU engine's tokens.
TEST_P(EngineGpuTest, LogitBiasOnTheHostPath) {
  const std::vector<int32_t> eos = host_->config().eos_token_ids;
  const int32_t forced = vocab_ / 3;
  Request force = Greedy(RandomTokens(30, vocab_, 21), 12);
  force.sampling.logit_bias = {{forced, 100.0f}};
  const std::vector<Request> base_reqs = {Greedy(RandomTokens(30, vocab_, 22), 4)};
  GpuEngine gpu = MakeGpuEngine(path_, SmallConfig());
  LocalEngine cpu(*host_, eos, "cpu", SmallConfig());
  const int32_t first = RunAll(*gpu.engine, base_reqs)[0].tokens.at(0);
  Request ban = base_reqs[0];
  ban.sampling.logit_bias = {{first, -100.0f}};
  const std::vector<Request> reqs = {force, ban, Greedy(RandomTokens(25, vocab_, 23), 16)};
  const std::vector<Result> a = RunAll(cpu, reqs), b = RunAll(*gpu.engine, reqs);
  ExpectSameGreedy(reqs[2], a[2], b[2], GetParam() + " plain row beside logit_bias rows");
  for (const Result* r : {&a[0], &b[0]}) EXPECT_EQ(r->tokens, std::vector<int32_t>(12, forced)) << GetParam();
  for (const Result* r : {&a[1], &b[1]}) EXPECT_NE(r->tokens.at(0), first) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(TinyModels, EngineGpuTest,
                         ::testing::Values("tiny-llama", "tiny-qwen3", "tiny-qwen3-moe",
                                           "tiny-deepseek-v3"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

}  // namespace
}  // namespace pg::engine
