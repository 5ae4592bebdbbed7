// The engine loop: scheduler (plans) -> executor (copies, one forward pass over every planned
// request, sampling) -> scheduler.Advance -> streamed events. One loop thread owns the
// scheduler, the model and the KV storage; callers talk to it through an inbox.
//
// Invariants:
//  * Only the loop thread touches the scheduler, the model, the KV storage and per-request
//    sampler state. Submit/Abort only push to the inbox (under mu_), after cheap synchronous
//    checks that reject requests that could never run.
//  * Every accepted request gets exactly one final event (finished == true).
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/api.h"
#include "engine/step_executor.h"
#include "models/model.h"
#include "runtime/sampler.h"
#include "scheduler/scheduler.h"

namespace pg::engine {

struct EngineConfig {
  int page_size = 16;                  // tokens per KV page
  int64_t kv_cache_bytes = 512ll << 20;// device (here: CPU RAM) KV budget
  int64_t host_cache_bytes = 0;        // host tier for evicted prefix pages; 0 = off
  int max_step_tokens = 2048;          // token budget of one forward pass
  // Prefill tokens one request may take per step; 0 = the step budget only: running prefills
  // fill what the decodes leave of the budget in rank (arrival) order, as vLLM's and
  // llama-server's batches do. A cap makes simultaneous prompts share every step, so all of
  // them finish late (docs/PERF.md "Prefill chunk policy").
  int max_prefill_chunk_tokens = 0;
  int max_running_requests = 64;
  int max_waiting_requests = 512;
  int max_context_tokens = 0;          // 0 = the model's context length
  int64_t session_ttl_ms = 300000;     // retention of a finished session's pages
  bool preempt_by_swap = true;         // swap to the host tier when it has room
  // Speculative decoding with prompt-lookup drafts (scheduler/ngram_proposer.h); off by
  // default. The executor must support drafts (the CPU one does).
  scheduler::SpeculativeConfig speculative;
  std::string Summary() const;
  // The context the engine serves for a model: max_context_tokens capped by the model's.
  int ContextFor(const models::ModelConfig& model) const;
};

class LocalEngine final : public Engine {
 public:
  // `model` outlives the engine. eos_ids: tokens that end generation (unless ignore_eos).
  // The CPU executor (CpuStepExecutor) over `model`: KV pages in RAM (config.kv_cache_bytes).
  LocalEngine(models::Model& model, std::vector<int32_t> eos_ids, std::string name,
              EngineConfig config);
  // Any executor (e.g. engine/cuda/cuda_executor.h); its page counts size the scheduler
  // (config.kv_cache_bytes / host_cache_bytes are the executor's business then).
  LocalEngine(std::unique_ptr<StepExecutor> executor, std::vector<int32_t> eos_ids,
              std::string name, EngineConfig config);
  ~LocalEngine() override;

  RequestId Submit(Request request, EventCallback on_event) override;
  void Abort(RequestId id) override;
  EngineStats Stats() const override;
  const ModelInfo& model_info() const override { return info_; }
  void Shutdown(bool drain) override;

  int num_kv_pages() const { return num_pages_; }

 private:
  struct Live;  // per-request state owned by the loop thread
  struct Pending {
    RequestId id;
    Request request;
    EventCallback callback;
  };

  void Loop();
  void DrainInbox();
  void ExecuteStep(const scheduler::Plan& plan, scheduler::StepResult* result);
  void Erase(std::unordered_map<RequestId, std::unique_ptr<Live>>::iterator it);
  void Deliver(std::vector<scheduler::RequestUpdate> updates);
  void RefreshStats(int64_t new_tokens);
  void Publish(int64_t new_tokens);  // take the scheduler's updates, refresh stats, deliver  // publishes the scheduler's counters to Stats()
  int64_t NowUs() const;

  std::unique_ptr<StepExecutor> executor_;
  std::vector<int32_t> eos_ids_;
  EngineConfig config_;
  ModelInfo info_;
  int num_pages_ = 0;
  int num_host_pages_ = 0;

  // Loop-thread state.
  std::unique_ptr<scheduler::Scheduler> scheduler_;
  std::unordered_map<RequestId, std::unique_ptr<Live>> live_;
  std::vector<runtime::SamplerState*> step_samplers_;  // per plan entry (capacity reused)
  std::vector<runtime::SampledToken> step_tokens_;
  uint64_t seed_counter_ = 0x5eed;

  // Shared with callers (under mu_).
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> inbox_;
  std::vector<RequestId> aborts_;
  RequestId next_id_ = 1;
  bool stopping_ = false;
  bool draining_ = false;
  EngineStats stats_;  // snapshot refreshed by the loop each step
  std::thread thread_;
};

}  // namespace pg::engine
