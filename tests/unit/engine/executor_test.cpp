// The engine's step-executor seam (engine/step_executor.h) on the CPU: the batch metadata a
// plan turns into, and the engine's contract with an executor (results through a wrapping
// executor equal the built-in CPU engine's; every request that begins also ends, once).
#include <gtest/gtest.h>

#include <future>
#include <map>
#include <mutex>
#include <random>

#include "engine/cpu_executor.h"
#include "engine/local_engine.h"
#include "models/loader.h"

namespace pg::engine {
namespace {

TEST(PlanBatch, BuildsTheForwardMetadataOfAPlan) {
  const std::vector<int32_t> dec_tokens = {42}, pre_tokens = {7, 8, 9};
  const std::vector<cache::PageId> dec_pages = {3, 5, 11}, pre_pages = {7};
  scheduler::Plan plan;
  plan.entries.push_back({.id = 1, .first_position = 20, .num_tokens = 1,
                          .input_tokens = dec_tokens, .page_table = dec_pages, .num_sample = 1,
                          .is_decode = true});
  plan.entries.push_back({.id = 2, .first_position = 0, .num_tokens = 3,
                          .input_tokens = pre_tokens, .page_table = pre_pages, .num_sample = 0});
  PlanBatch b;
  b.Build(plan, /*page_size=*/16);
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{42, 7, 8, 9}));
  EXPECT_EQ(b.positions, (std::vector<int32_t>{20, 0, 1, 2}));
  EXPECT_EQ(b.q_start, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(b.q_len, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(b.kv_len, (std::vector<int32_t>{21, 3}));
  // Only the pages of positions [0, kv_len): 2 of the decode entry's 3, 1 of the chunk's.
  EXPECT_EQ(b.page_start, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(b.page_table, (std::vector<int32_t>{3, 5, 7}));
  EXPECT_EQ(b.rows, (std::vector<int32_t>{0}));  // the chunk does not sample
  const ops::AttentionBatch v = b.View(16);
  EXPECT_EQ(v.num_seqs, 2);
  EXPECT_EQ(v.num_tokens(), 4);
}

// Forwards to a CpuStepExecutor and records the engine's calls.
class RecordingExecutor final : public StepExecutor {
 public:
  RecordingExecutor(models::Model& m, const CpuExecutorOptions& o) : inner_(m, o) {}
  const models::ModelConfig& model_config() const override { return inner_.model_config(); }
  int num_device_pages() const override { return inner_.num_device_pages(); }
  int num_host_pages() const override { return inner_.num_host_pages(); }
  std::string Describe() const override { return "recording: " + inner_.Describe(); }
  void BeginRequest(uint64_t id, const runtime::SamplingParams& p,
                    std::span<const int32_t> prompt) override {
    std::lock_guard<std::mutex> lock(mu);
    ++begun[id];
    prompt_len[id] = prompt.size();
  }
  void EndRequest(uint64_t id) override {
    std::lock_guard<std::mutex> lock(mu);
    ++ended[id];
  }
  void Execute(const scheduler::Plan& plan, std::span<runtime::SamplerState* const> samplers,
               std::vector<runtime::SampledToken>* out) override {
    for (size_t i = 0; i < plan.entries.size(); ++i)
      EXPECT_EQ(samplers[i] != nullptr, plan.entries[i].num_sample > 0);
    const size_t before = out->size();
    inner_.Execute(plan, samplers, out);
    std::lock_guard<std::mutex> lock(mu);
    sampled += int64_t(out->size() - before);
  }
  std::mutex mu;
  std::map<uint64_t, int> begun, ended;
  std::map<uint64_t, size_t> prompt_len;
  int64_t sampled = 0;

 private:
  CpuStepExecutor inner_;
};

struct Done {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
};

TEST(ExecutorSeam, AWrappedExecutorGivesTheBuiltInEnginesResultsAndEndsEveryRequest) {
  auto model = models::LoadModel({.path = "tests/data/models/tiny-llama"});
  const int vocab = model->config().vocab_size;
  EngineConfig cfg;
  cfg.kv_cache_bytes = 8ll << 20;
  cfg.max_step_tokens = 48;
  cfg.max_prefill_chunk_tokens = 13;
  cfg.max_context_tokens = 256;
  std::mt19937 rng(5);
  std::vector<Request> reqs;
  for (int i = 0; i < 5; ++i) {
    Request r;
    for (int t = 0; t < 10 + 17 * i; ++t) r.prompt_tokens.push_back(int32_t(3 + rng() % (vocab - 3)));
    r.sampling.temperature = 0;
    r.sampling.max_tokens = 12;
    r.sampling.ignore_eos = true;
    reqs.push_back(r);
  }
  auto run = [&](LocalEngine& e, int abort_index) {
    std::vector<std::promise<Done>> ps(reqs.size());
    std::vector<Done> got(reqs.size());
    std::vector<RequestId> ids;
    for (size_t i = 0; i < reqs.size(); ++i)
      ids.push_back(e.Submit(reqs[i], [&, i](const TokenEvent& ev) {
        got[i].tokens.insert(got[i].tokens.end(), ev.tokens.begin(), ev.tokens.end());
        if (ev.finished) got[i].reason = ev.finish_reason, ps[i].set_value(got[i]);
      }));
    if (abort_index >= 0) e.Abort(ids[size_t(abort_index)]);
    std::vector<Done> out;
    for (auto& p : ps) out.push_back(p.get_future().get());
    return out;
  };
  LocalEngine builtin(*model, model->config().eos_token_ids, "builtin", cfg);
  const std::vector<Done> want = run(builtin, -1);
  auto rec = std::make_unique<RecordingExecutor>(
      *model, CpuExecutorOptions{.page_size = cfg.page_size, .kv_cache_bytes = cfg.kv_cache_bytes,
                                 .max_rows = cfg.max_running_requests});
  RecordingExecutor* r = rec.get();
  LocalEngine wrapped(std::move(rec), model->config().eos_token_ids, "wrapped", cfg);
  EXPECT_EQ(wrapped.num_kv_pages(), builtin.num_kv_pages());
  const std::vector<Done> got = run(wrapped, -1);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    EXPECT_EQ(got[i].reason, FinishReason::kLength);
  }
  const std::vector<Done> aborted = run(wrapped, 4);  // one aborted among them
  EXPECT_EQ(aborted[4].reason, FinishReason::kAbort);
  wrapped.Shutdown(/*drain=*/true);
  std::lock_guard<std::mutex> lock(r->mu);
  // The aborted request may be dropped from the inbox before it begins.
  EXPECT_GE(r->begun.size(), 2 * reqs.size() - 1);
  for (const auto& [id, n] : r->begun) {
    EXPECT_EQ(n, 1) << "request " << id;
    EXPECT_EQ(r->ended[id], 1) << "request " << id << " ended " << r->ended[id] << " times";
  }
  EXPECT_EQ(r->ended.size(), r->begun.size());
  EXPECT_GE(r->sampled, int64_t(reqs.size() * 12 + 4 * 12));
}

}  // namespace
}  // namespace pg::engine
