// The scheduler: a pure state machine that decides, every step, which requests run and which
// KV pages they own. No GPU, no I/O, no clock: time comes in as numbers from the caller.
//
// Driving loop (one thread; the engine loop, the simulator and the tests all do this):
//
//   Scheduler s(config);
//   s.Submit(id, params);                       // any time between steps
//   while (...) {
//     const Plan& plan = s.NextPlan(now_us);    // may be empty: nothing to run
//     if (plan.empty()) { wait for work; continue; }
//     executor.Run(plan);                       // copies, then the forward pass, sampling
//     s.Advance(result, now_us);                // exactly once per non-empty plan
//     for (auto& u : s.TakeUpdates()) stream(u);
//   }
//
// Policy (docs/design/scheduler.md):
//  * Rank = (priority desc, arrival asc). Decodes are planned first (1 token each, in rank
//    order), then prefill chunks of running requests, then admissions from the waiting
//    queue in rank order, all under `max_step_tokens`; admission stops at the first waiting
//    request that does not fit (no overtaking, so the head of the queue cannot starve).
//  * When KV runs short a request may preempt only requests ranked strictly below it
//    (victim: the lowest ranked, or the one holding the most pages). The top-ranked live
//    request therefore always progresses, and every request fits alone (checked at
//    Submit), so every admitted request finishes: no deadlock, no starvation.
//  * A waiting request whose next uncached prompt page a running request is prefilling right
//    now waits for that page to reach the prefix cache instead of computing it twice.
//  * Preemption swaps the victim's pages to the host tier when configured and there is
//    room, else drops them to be recomputed (its full pages stay in the prefix cache).
//  * Speculative decoding (config.speculative): a decode carries up to num_draft_tokens
//    prompt-lookup drafts (ngram_proposer.h) when the step budget, the request's remaining
//    tokens and free pages allow; drafts never preempt or evict. Not for hybrid models.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/kv_cache.h"
#include "cache/state_slots.h"
#include "scheduler/ngram_proposer.h"
#include "scheduler/plan.h"
#include "scheduler/request_fsm.h"

namespace pg::scheduler {

enum class PreemptionMode { kRecompute, kSwap };
enum class VictimPolicy { kLowestRank, kLongest };

struct StateCacheConfig {        // linear-attention (hybrid) models
  int32_t num_state_slots = 0;   // 0 = model has no linear-attention layers
  int32_t num_checkpoints = 0;   // state checkpoints kept for prefix reuse
  int32_t checkpoint_interval_pages = 1;  // checkpoint every N page boundaries
};

struct SchedulerConfig {
  cache::KvCacheConfig kv;
  StateCacheConfig state;
  int32_t max_step_tokens = 8192;          // token budget of one forward pass
  int32_t max_prefill_chunk_tokens = 0;    // per request per step; 0 = budget only
  int32_t max_running_requests = 256;
  int32_t max_waiting_requests = 1 << 20;
  int32_t max_context_tokens = 0;          // prompt + output; 0 = no limit
  int32_t admission_reserve_pages = 0;     // keep this many pages free when admitting
  SpeculativeConfig speculative;          // off by default
  PreemptionMode preemption = PreemptionMode::kRecompute;
  VictimPolicy victim = VictimPolicy::kLowestRank;
  int64_t session_ttl_us = 0;              // retention of a finished session's pages; 0 = off
};

struct SubmitParams {
  std::vector<int32_t> prompt_tokens;  // non-empty
  int32_t max_new_tokens = 256;        // >= 1
  std::string session_id;              // optional: conversation id (retention)
  int32_t priority = 0;                // higher runs first under pressure
};

struct SchedulerStats {
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  int64_t num_preemptions = 0;
  int64_t num_swapped_out = 0;
  int64_t prompt_tokens = 0;          // of finished-or-admitted requests (first admission)
  int64_t cached_prompt_tokens = 0;   // of those, served from the prefix cache
  int64_t computed_tokens = 0;        // all tokens run through the model (incl. recompute)
  int64_t num_steps = 0;
  int64_t num_drafts = 0;             // speculative decode entries planned and run
  int64_t draft_tokens = 0;           // draft tokens in them
  int64_t accepted_draft_tokens = 0;  // of those, accepted
};

class Scheduler {
 public:
  // Throws pg::Error(kInvalidArgument) for a bad config.
  explicit Scheduler(const SchedulerConfig& config);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request under the caller's id. Throws pg::Error: kInvalidArgument (empty
  // prompt, duplicate id, max_new_tokens < 1), kOutOfRange (longer than max_context_tokens),
  // kResourceExhausted (can never fit in KV; waiting queue full).
  void Submit(RequestId id, SubmitParams params);
  // Finishes a request with reason kAbort (now, or at the end of the step that is running
  // it). Returns false for an unknown or already finished id.
  bool Abort(RequestId id);

  // Plans the next step. The reference stays valid until the next NextPlan. After a
  // non-empty plan, Advance must come before the next NextPlan.
  const Plan& NextPlan(int64_t now_us);
  // Applies the executed step: computed tokens, sampled tokens, stops. Throws
  // pg::Error(kInvalidArgument) if `result` does not match the plan's sampling entries.
  void Advance(const StepResult& result, int64_t now_us);
  // Updates (new tokens, finishes) since the last call.
  std::vector<RequestUpdate> TakeUpdates();

  bool HasWork() const { return !running_.empty() || !waiting_.empty(); }
  SchedulerStats stats() const;
  const cache::KvCacheManager& kv() const { return kv_; }
  const SchedulerConfig& config() const { return config_; }
  // State name of a live request ("Queued", ...), or nullptr if unknown / finished.
  const char* RequestStateName(RequestId id) const;

  // Checks every cross-structure invariant (O(requests + pages)); fatal on violation:
  // page refcounts equal holders, running requests' pages cover their computed tokens,
  // cached tokens <= prompt tokens, caps respected. For tests and debug builds.
  void CheckInvariants() const;

 private:
  struct Request;
  struct RankLess {
    bool operator()(const Request* a, const Request* b) const;
  };

  void PlanRunning(bool decodes);  // running decodes, or running prefills, in rank order
  void PlanAdmissions();
  bool TryAdmit(Request* r);
  bool PrefixInFlight(const Request& r, int32_t max_pages) const;
  bool EnsurePages(Request* r, int32_t num_tokens);  // may preempt lower-ranked requests
  Request* PickVictim(const Request* requester) const;
  void Preempt(Request* victim);
  int32_t PlanDrafts(Request* r);  // fills r's step input; returns the drafts' count
  void AddEntry(Request* r, int32_t num_tokens, int32_t num_draft = 0);
  void FinishRequest(Request* r, FinishReason reason, bool emit_update = true);
  void InsertComputedPages(Request* r);
  int32_t PagesFor(int64_t num_tokens) const;

  SchedulerConfig config_;
  cache::KvCacheManager kv_;
  cache::StateSlotPool state_slots_;
  cache::CheckpointStore checkpoints_;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;  // live requests
  std::set<Request*, RankLess> waiting_;  // Queued and Preempted, best rank first
  std::set<Request*, RankLess> running_;  // Prefilling and Decoding, best rank first
  Plan plan_;
  std::vector<Request*> entry_requests_;  // parallel to plan_.entries
  int32_t budget_ = 0;                    // tokens left in the step being planned
  std::vector<uint64_t> pending_checkpoints_;  // saved by the outstanding plan, not yet valid
  bool plan_outstanding_ = false;
  uint64_t next_arrival_ = 0;
  int64_t now_us_ = 0;
  std::vector<RequestUpdate> updates_;
  SchedulerStats stats_;
};

}  // namespace pg::scheduler
