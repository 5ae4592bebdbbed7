#include "engine/local_engine.h"

#include <algorithm>
#include <chrono>
#include <map>

#include <fmt/format.h>

#include "core/log.h"
#include "core/status.h"
#include "engine/cpu_executor.h"

namespace pg::engine {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

std::string EngineConfig::Summary() const {
  return fmt::format(
      "page {} tokens, KV {:.0f} MiB, host tier {:.0f} MiB, step budget {} tokens, prefill "
      "chunk {}, running <= {}, waiting <= {}, session TTL {} s{}",
      page_size, double(kv_cache_bytes) / (1 << 20), double(host_cache_bytes) / (1 << 20),
      max_step_tokens, max_prefill_chunk_tokens, max_running_requests, max_waiting_requests,
      session_ttl_ms / 1000,
      speculative.enabled()
          ? fmt::format(", speculative: n-gram drafts of up to {} tokens (n = {}..{})",
                        speculative.num_draft_tokens, speculative.min_ngram, speculative.max_ngram)
          : std::string());
}

int EngineConfig::ContextFor(const models::ModelConfig& mc) const {
  return max_context_tokens > 0 ? std::min(max_context_tokens, mc.max_context) : mc.max_context;
}

struct LocalEngine::Live {
  EventCallback callback;
  runtime::SamplerState sampler;
  bool ignore_eos = false;
  std::vector<int32_t> stop_ids;       // eos (unless ignore_eos) + request stop ids
  bool want_logprobs = false;
  std::deque<TokenLogprob> logprobs;   // sampled, not yet delivered
  std::string error;                   // set when the step running it failed
  int num_prompt_tokens = 0;
};

namespace {
FinishReason FromScheduler(scheduler::FinishReason r) {
  switch (r) {
    case scheduler::FinishReason::kStop: return FinishReason::kStop;
    case scheduler::FinishReason::kLength: return FinishReason::kLength;
    case scheduler::FinishReason::kAbort: return FinishReason::kAbort;
    case scheduler::FinishReason::kError: return FinishReason::kError;
  }
  return FinishReason::kError;
}
}  // namespace

LocalEngine::LocalEngine(models::Model& model, std::vector<int32_t> eos_ids, std::string name,
                         EngineConfig config)
    : LocalEngine(std::make_unique<CpuStepExecutor>(
                      model, CpuExecutorOptions{.page_size = config.page_size,
                                                .kv_cache_bytes = config.kv_cache_bytes,
                                                .host_cache_bytes = config.host_cache_bytes,
                                                .max_rows = config.max_running_requests *
                                                            (1 + config.speculative.num_draft_tokens)}),
                  std::move(eos_ids), std::move(name), config) {}

LocalEngine::LocalEngine(std::unique_ptr<StepExecutor> executor, std::vector<int32_t> eos_ids,
                         std::string name, EngineConfig config)
    : executor_(std::move(executor)), eos_ids_(std::move(eos_ids)), config_(config) {
  const models::ModelConfig& mc = executor_->model_config();
  info_.name = std::move(name);
  info_.max_context_tokens = config_.ContextFor(mc);
  info_.vocab_size = mc.vocab_size;
  info_.eos_token_ids = eos_ids_;
  num_pages_ = executor_->num_device_pages();
  num_host_pages_ = executor_->num_host_pages();
  PG_ENSURE(num_pages_ >= 2, kInvalidArgument, "the executor holds {} KV pages (< 2)", num_pages_);
  scheduler::SchedulerConfig sc;
  sc.kv.page_size_tokens = config_.page_size;
  sc.kv.num_device_pages = num_pages_;
  sc.kv.num_host_pages = num_host_pages_;
  sc.max_step_tokens = config_.max_step_tokens;
  sc.max_prefill_chunk_tokens = config_.max_prefill_chunk_tokens;
  sc.max_running_requests = config_.max_running_requests;
  sc.max_waiting_requests = config_.max_waiting_requests;
  sc.max_context_tokens = info_.max_context_tokens;
  sc.preemption = config_.preempt_by_swap && num_host_pages_ > 0 ? scheduler::PreemptionMode::kSwap
                                                                  : scheduler::PreemptionMode::kRecompute;
  sc.session_ttl_us = config_.session_ttl_ms * 1000;
  sc.speculative = config_.speculative;
  scheduler_ = std::make_unique<scheduler::Scheduler>(sc);
  stats_.kv_pages_total = num_pages_;
  stats_.kv_pages_free = num_pages_;
  PG_LOG_INFO("engine: {}; {}", config_.Summary(), executor_->Describe());
  thread_ = std::thread([this] { Loop(); });
}

LocalEngine::~LocalEngine() { Shutdown(/*drain=*/false); }

int64_t LocalEngine::NowUs() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

RequestId LocalEngine::Submit(Request request, EventCallback on_event) {
  const int vocab = info_.vocab_size;
  const int64_t n = int64_t(request.prompt_tokens.size());
  PG_ENSURE(n > 0, kInvalidArgument, "the prompt is empty");
  for (int32_t t : request.prompt_tokens)
    PG_ENSURE(t >= 0 && t < vocab, kInvalidArgument, "token id {} is outside the vocabulary [0, {})", t, vocab);
  PG_ENSURE(n < info_.max_context_tokens, kOutOfRange,
            "the prompt has {} tokens; this model's context is {} tokens (including at least 1 "
            "generated token)",
            n, info_.max_context_tokens);
  PG_ENSURE(request.sampling.max_tokens >= 1, kInvalidArgument, "max_tokens must be at least 1");
  for (const auto& [t, bias] : request.sampling.logit_bias)
    PG_ENSURE(t >= 0 && t < vocab, kInvalidArgument,
              "logit_bias: token id {} is outside the vocabulary [0, {})", t, vocab);
  request.sampling.max_tokens =
      int(std::min<int64_t>(request.sampling.max_tokens, info_.max_context_tokens - n));
  const int64_t pages = (n + request.sampling.max_tokens + config_.page_size - 1) / config_.page_size;
  PG_ENSURE(pages <= num_pages_, kResourceExhausted,
            "the request needs {} KV pages ({} tokens) but the cache holds {} pages", pages,
            n + request.sampling.max_tokens, num_pages_);
  std::lock_guard<std::mutex> lock(mu_);
  PG_ENSURE(!stopping_, kResourceExhausted, "the engine is shutting down");
  PG_ENSURE(int64_t(inbox_.size()) + stats_.num_waiting < config_.max_waiting_requests,
            kResourceExhausted, "the waiting queue is full ({} requests)", config_.max_waiting_requests);
  RequestId id = next_id_++;
  inbox_.push_back({id, std::move(request), std::move(on_event)});
  cv_.notify_one();
  return id;
}

void LocalEngine::Abort(RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  aborts_.push_back(id);
  cv_.notify_one();
}

EngineStats LocalEngine::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStats s = stats_;
  s.num_waiting += int(inbox_.size());
  return s;
}

void LocalEngine::Shutdown(bool drain) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      stopping_ = true;
      draining_ = drain;
    }
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

void LocalEngine::DrainInbox() {
  std::deque<Pending> inbox;
  std::vector<RequestId> aborts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox.swap(inbox_);
    aborts.swap(aborts_);
  }
  for (Pending& p : inbox) {
    // An abort that arrived before the request reached the scheduler.
    if (std::find(aborts.begin(), aborts.end(), p.id) != aborts.end()) {
      TokenEvent ev{.id = p.id, .finished = true, .finish_reason = FinishReason::kAbort,
                    .num_prompt_tokens = int(p.request.prompt_tokens.size())};
      p.callback(ev);
      continue;
    }
    const auto& sp = p.request.sampling;
    auto live = std::make_unique<Live>(Live{
        .callback = std::move(p.callback),
        .sampler = runtime::SamplerState(sp, p.request.prompt_tokens, seed_counter_++ * 0x9e3779b97f4a7c15ull),
        .ignore_eos = sp.ignore_eos,
        .stop_ids = sp.stop_token_ids,
        .want_logprobs = sp.top_logprobs >= 0,
        .num_prompt_tokens = int(p.request.prompt_tokens.size())});
    if (!sp.ignore_eos) live->stop_ids.insert(live->stop_ids.end(), eos_ids_.begin(), eos_ids_.end());
    scheduler::SubmitParams params{.prompt_tokens = std::move(p.request.prompt_tokens),
                                   .max_new_tokens = sp.max_tokens,
                                   .session_id = std::move(p.request.session_id),
                                   .priority = p.request.priority};
    try {
      executor_->BeginRequest(p.id, sp, params.prompt_tokens);
      scheduler_->Submit(p.id, std::move(params));
      live_.emplace(p.id, std::move(live));
    } catch (const Error& e) {
      executor_->EndRequest(p.id);
      TokenEvent ev{.id = p.id, .finished = true, .finish_reason = FinishReason::kError,
                    .error = e.what(), .num_prompt_tokens = live->num_prompt_tokens};
      live->callback(ev);
    }
  }
  for (RequestId id : aborts) scheduler_->Abort(id);  // unknown / finished ids: no-op
}

void LocalEngine::ExecuteStep(const scheduler::Plan& plan, scheduler::StepResult* result) {
  step_samplers_.clear();
  step_tokens_.clear();
  for (const scheduler::PlanEntry& e : plan.entries)
    step_samplers_.push_back(e.num_sample > 0 ? &live_.at(e.id)->sampler : nullptr);
  executor_->Execute(plan, step_samplers_, &step_tokens_);
  // Per sampling entry, in plan order, runtime::SampleSpeculative's run of samples: while a
  // sample equals the entry's next draft the executor sampled on, so the run is 1 + the
  // leading matches. The output ends at the run's last sample, or at its first stop token.
  size_t r = 0;
  for (const scheduler::PlanEntry& e : plan.entries) {
    if (e.num_sample == 0) continue;
    Live& l = *live_.at(e.id);
    int32_t run = 1;
    for (;; ++run) {
      PG_CHECK(r + size_t(run) <= step_tokens_.size(), "executor returned {} tokens", step_tokens_.size());
      if (run > e.num_draft || step_tokens_[r + size_t(run) - 1].token != e.input_tokens[size_t(run)]) break;
    }
    int32_t last = 0;  // the entry's new token: run - 1, or the first stop before it
    bool stop = false;
    for (; last < run; ++last) {
      const int32_t token = step_tokens_[r + size_t(last)].token;
      stop = std::find(l.stop_ids.begin(), l.stop_ids.end(), token) != l.stop_ids.end();
      if (stop || last == run - 1) break;
    }
    if (l.want_logprobs)
      for (int32_t j = 0; j <= last; ++j) {
        runtime::SampledToken& t = step_tokens_[r + size_t(j)];
        l.logprobs.push_back({t.token, t.logprob, std::move(t.top)});
      }
    result->sampled.push_back(
        {.id = e.id, .token = step_tokens_[r + size_t(last)].token, .stop = stop, .num_accepted = last});
    r += size_t(run);
  }
}

void LocalEngine::Erase(std::unordered_map<RequestId, std::unique_ptr<Live>>::iterator it) {
  executor_->EndRequest(it->first);
  live_.erase(it);
}

void LocalEngine::Deliver(std::vector<scheduler::RequestUpdate> updates) {
  // One event per request per step, in the order requests first appear.
  std::vector<RequestId> order;
  std::map<RequestId, TokenEvent> events;
  for (const auto& u : updates) {
    auto it = live_.find(u.id);
    if (it == live_.end()) continue;
    Live& l = *it->second;
    auto [ev_it, inserted] = events.try_emplace(u.id);
    TokenEvent& ev = ev_it->second;
    if (inserted) order.push_back(u.id);
    ev.id = u.id;
    ev.num_prompt_tokens = u.num_prompt_tokens;
    ev.num_cached_tokens = u.num_cached_tokens;
    ev.num_generated_tokens = u.num_generated_tokens;
    if (u.token) {
      bool is_stop = std::find(l.stop_ids.begin(), l.stop_ids.end(), *u.token) != l.stop_ids.end();
      TokenLogprob lp;
      if (l.want_logprobs && !l.logprobs.empty()) {
        lp = std::move(l.logprobs.front());
        l.logprobs.pop_front();
      }
      if (!is_stop) {  // stop tokens end the output; they are not part of it
        ev.tokens.push_back(*u.token);
        if (l.want_logprobs) ev.logprobs.push_back(std::move(lp));
      }
    }
    if (u.finished) {
      ev.finished = true;
      ev.finish_reason = l.error.empty() ? FromScheduler(u.reason) : FinishReason::kError;
      ev.error = l.error;
    }
  }
  for (RequestId id : order) {
    TokenEvent& ev = events[id];
    auto it = live_.find(id);
    EventCallback cb = it->second->callback;
    if (ev.finished) Erase(it);
    cb(ev);
  }
}

void LocalEngine::RefreshStats(int64_t new_tokens) {
  scheduler::SchedulerStats ss = scheduler_->stats();
  std::lock_guard<std::mutex> lock(mu_);
  stats_.num_running = ss.num_running;
  stats_.num_waiting = ss.num_waiting;
  stats_.kv_pages_free = scheduler_->kv().num_free_pages() + scheduler_->kv().num_evictable_pages();
  stats_.prefix_cache_hit_tokens = ss.cached_prompt_tokens;
  stats_.prompt_tokens = ss.prompt_tokens;
  stats_.spec_drafts = ss.num_drafts;
  stats_.spec_draft_tokens = ss.draft_tokens;
  stats_.spec_accepted_tokens = ss.accepted_draft_tokens;
  stats_.generated_tokens += new_tokens;
}

void LocalEngine::Publish(int64_t new_tokens) {
  // Stats first: a caller woken by a final event must already see its pages returned.
  std::vector<scheduler::RequestUpdate> updates = scheduler_->TakeUpdates();
  RefreshStats(new_tokens);
  Deliver(std::move(updates));
}

void LocalEngine::Loop() {
  for (;;) {
    DrainInbox();
    bool stop, drain;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop = stopping_;
      drain = draining_;
    }
    if (stop && !drain) {
      for (const auto& [id, l] : live_) scheduler_->Abort(id);
      Publish(0);
    }
    if (!scheduler_->HasWork()) {
      Publish(0);
      std::unique_lock<std::mutex> lock(mu_);
      if (stopping_ && inbox_.empty()) break;
      cv_.wait(lock, [&] { return !inbox_.empty() || !aborts_.empty() || stopping_; });
      continue;
    }
    const scheduler::Plan& plan = scheduler_->NextPlan(NowUs());
    if (plan.empty()) {  // nothing could be planned this instant
      Publish(0);
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(1));
      continue;
    }
    scheduler::StepResult result;
    try {
      ExecuteStep(plan, &result);
    } catch (const std::exception& e) {
      // The step failed (e.g. out of memory): every request in it finishes with the error;
      // the engine keeps serving the others.
      PG_LOG_ERROR("step {} failed: {}", plan.step, e.what());
      result.sampled.clear();
      for (const auto& en : plan.entries) {
        if (auto it = live_.find(en.id); it != live_.end()) it->second->error = e.what();
        if (en.num_sample > 0) result.sampled.push_back({.id = en.id, .token = 0, .stop = true});
      }
    }
    scheduler_->Advance(result, NowUs());
    int64_t new_tokens = 0;
    for (const scheduler::SampledToken& t : result.sampled) new_tokens += 1 + t.num_accepted;
    Publish(new_tokens);
  }
  // Requests still queued at exit are told they were aborted.
  std::deque<Pending> rest;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rest.swap(inbox_);
  }
  for (Pending& p : rest)
    p.callback({.id = p.id, .finished = true, .finish_reason = FinishReason::kAbort});
}

}  // namespace pg::engine
