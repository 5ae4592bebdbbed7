#include "scheduler/scheduler.h"

#include <algorithm>
#include <unordered_map>

#include "core/status.h"

namespace pg::scheduler {

struct Scheduler::Request {
  RequestId id = 0;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int32_t num_prompt_tokens = 0;
  int32_t max_new_tokens = 0;
  std::string session_id;
  int32_t priority = 0;
  uint64_t arrival = 0;
  int32_t num_computed = 0;       // tokens whose KV is in the pages this request holds
  int32_t num_cached_tokens = 0;  // prompt tokens served from cache at first admission
  int32_t num_inserted_pages = 0; // pages [0, n) offered to the prefix cache
  bool admitted_once = false;
  bool abort_requested = false;
  int32_t planned_tokens = 0;     // tokens in the outstanding plan (0 = no entry)
  std::optional<cache::CheckpointId> restore_checkpoint;  // for the next entry only
  std::vector<uint64_t> keys;     // prefix-cache keys of the full pages of `tokens`
  std::vector<int32_t> step_input;  // a speculative entry's input: [last token, drafts...]
  RequestState state = state::Queued{};

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t remaining() const { return num_tokens() - num_computed; }
  int32_t num_generated() const { return num_tokens() - num_prompt_tokens; }
};

bool Scheduler::RankLess::operator()(const Request* a, const Request* b) const {
  if (a->priority != b->priority) return a->priority > b->priority;
  return a->arrival < b->arrival;
}

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config),
      kv_(config.kv),
      state_slots_(config.state.num_state_slots),
      checkpoints_(config.state.num_state_slots > 0 ? config.state.num_checkpoints : 0) {
  PG_ENSURE(config.max_step_tokens > 0, kInvalidArgument, "max_step_tokens must be > 0");
  PG_ENSURE(config.max_running_requests > 0, kInvalidArgument,
            "max_running_requests must be > 0");
  PG_ENSURE(config.max_prefill_chunk_tokens >= 0, kInvalidArgument,
            "max_prefill_chunk_tokens must be >= 0");
  PG_ENSURE(config.state.checkpoint_interval_pages > 0, kInvalidArgument,
            "checkpoint_interval_pages must be > 0");
  PG_ENSURE(config.admission_reserve_pages >= 0, kInvalidArgument,
            "admission_reserve_pages must be >= 0");
  ValidateSpeculativeConfig(config.speculative);
  PG_ENSURE(!config.speculative.enabled() || config.state.num_state_slots == 0, kInvalidArgument,
            "speculative decoding is not supported for models with linear-attention layers "
            "(their recurrent state cannot step back over rejected drafts)");
}

Scheduler::~Scheduler() {
  // Requests hold handles into kv_ / state_slots_: destroy them first.
  waiting_.clear();
  running_.clear();
  requests_.clear();
}

int32_t Scheduler::PagesFor(int64_t num_tokens) const {
  const int64_t p = config_.kv.page_size_tokens;
  return static_cast<int32_t>((num_tokens + p - 1) / p);
}

void Scheduler::Submit(RequestId id, SubmitParams params) {
  const int64_t num_prompt = static_cast<int64_t>(params.prompt_tokens.size());
  PG_ENSURE(num_prompt > 0, kInvalidArgument, "request {}: empty prompt", id);
  PG_ENSURE(params.max_new_tokens >= 1, kInvalidArgument,
            "request {}: max_new_tokens must be >= 1, got {}", id, params.max_new_tokens);
  PG_ENSURE(!requests_.count(id), kInvalidArgument, "request id {} is already live", id);
  const int64_t total = num_prompt + params.max_new_tokens;
  PG_ENSURE(config_.max_context_tokens == 0 || total <= config_.max_context_tokens, kOutOfRange,
            "request {}: prompt ({}) + max_new_tokens ({}) exceeds the context of {} tokens",
            id, num_prompt, params.max_new_tokens, config_.max_context_tokens);
  PG_ENSURE(PagesFor(total) <= kv_.num_pages(), kResourceExhausted,
            "request {}: {} tokens need {} KV pages, the pool has {}", id, total,
            PagesFor(total), kv_.num_pages());
  PG_ENSURE(static_cast<int32_t>(waiting_.size()) < config_.max_waiting_requests,
            kResourceExhausted, "waiting queue full ({} requests)", waiting_.size());
  auto r = std::make_unique<Request>();
  r->id = id;
  r->tokens = std::move(params.prompt_tokens);
  r->num_prompt_tokens = static_cast<int32_t>(num_prompt);
  r->max_new_tokens = params.max_new_tokens;
  r->session_id = std::move(params.session_id);
  r->priority = params.priority;
  r->arrival = next_arrival_++;
  waiting_.insert(r.get());
  requests_.emplace(id, std::move(r));
}

bool Scheduler::Abort(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  Request* r = it->second.get();
  if (plan_outstanding_ && r->planned_tokens > 0) {
    r->abort_requested = true;  // finished by Advance, after its step
  } else {
    FinishRequest(r, FinishReason::kAbort);
  }
  return true;
}

// ---- planning -------------------------------------------------------------------------

const Plan& Scheduler::NextPlan(int64_t now_us) {
  PG_ENSURE(!plan_outstanding_, kInvalidArgument, "NextPlan called before Advance of step {}",
            plan_.step);
  now_us_ = std::max(now_us_, now_us);
  kv_.SetTime(now_us_);
  plan_ = Plan{};
  plan_.step = static_cast<uint64_t>(stats_.num_steps);
  entry_requests_.clear();
  budget_ = config_.max_step_tokens;
  PlanRunning(/*decodes=*/true);
  PlanRunning(/*decodes=*/false);
  PlanAdmissions();

  // Decodes first (an admitted swapped-in request may be a decode), then fill the spans.
  std::vector<size_t> order(plan_.entries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_partition(order.begin(), order.end(),
                        [&](size_t i) { return plan_.entries[i].is_decode; });
  std::vector<PlanEntry> entries;
  std::vector<Request*> reqs;
  entries.reserve(order.size());
  reqs.reserve(order.size());
  for (size_t i : order) {
    entries.push_back(std::move(plan_.entries[i]));
    reqs.push_back(entry_requests_[i]);
  }
  plan_.entries = std::move(entries);
  entry_requests_ = std::move(reqs);
  for (size_t i = 0; i < plan_.entries.size(); ++i) {
    PlanEntry& e = plan_.entries[i];
    const Request* r = entry_requests_[i];
    e.input_tokens = e.num_draft > 0 ? std::span<const int32_t>(r->step_input)
                                     : std::span<const int32_t>(r->tokens).subspan(e.first_position, e.num_tokens);
    e.page_table = PagesOf(r->state)->ids().first(PagesFor(e.first_position + e.num_tokens));
    plan_.num_decode_entries += e.is_decode ? 1 : 0;
  }
  plan_outstanding_ = !plan_.empty();
  return plan_;
}

void Scheduler::PlanRunning(bool decodes) {
  // Snapshot: preemption below removes (lower-ranked) requests from running_.
  const std::vector<Request*> order(running_.begin(), running_.end());
  for (Request* r : order) {
    if (budget_ == 0) break;
    const bool is_decode = std::holds_alternative<state::Decoding>(r->state);
    if (!IsRunning(r->state) || is_decode != decodes || r->planned_tokens > 0) continue;
    int32_t n = std::min(r->remaining(), budget_);
    if (config_.max_prefill_chunk_tokens > 0 && !decodes) {
      n = std::min(n, config_.max_prefill_chunk_tokens);
    }
    if (!EnsurePages(r, r->num_computed + n)) continue;
    AddEntry(r, n, decodes ? PlanDrafts(r) : 0);
  }
}

// Drafts for a decoding request whose decode token has its page: as many as the proposer
// finds, within the step budget, the request's max_new_tokens and context (every draft
// accepted plus one more token must fit) and the pages free right now (drafts never preempt
// or evict).
int32_t Scheduler::PlanDrafts(Request* r) {
  const SpeculativeConfig& sc = config_.speculative;
  if (!sc.enabled()) return 0;
  int32_t room = std::min({sc.num_draft_tokens, budget_ - 1,
                           r->max_new_tokens - r->num_generated() - 1});
  if (config_.max_context_tokens > 0)
    room = std::min(room, config_.max_context_tokens - r->num_tokens() - 1);
  cache::PageList* pages = PagesOf(r->state);
  const int32_t P = config_.kv.page_size_tokens;
  const int64_t page_room = int64_t(pages->size() + kv_.num_free_pages()) * P - r->num_tokens();
  room = int32_t(std::min<int64_t>(room, page_room));
  if (room <= 0) return 0;
  r->step_input.assign(1, r->tokens.back());
  const int32_t d = ProposeNgramDrafts(r->tokens, sc, room, &r->step_input);
  if (d == 0) return 0;
  const int32_t need = PagesFor(r->num_tokens() + d) - static_cast<int32_t>(pages->size());
  if (need > 0) PG_CHECK(kv_.Allocate(need, pages, &plan_.copies), "draft pages: free pages vanished");
  return d;
}

void Scheduler::PlanAdmissions() {
  while (budget_ > 0 && !waiting_.empty() &&
         static_cast<int32_t>(running_.size()) < config_.max_running_requests) {
    if (!TryAdmit(*waiting_.begin())) break;  // no overtaking: the head waits for room
  }
}

bool Scheduler::TryAdmit(Request* r) {
  const bool hybrid = config_.state.num_state_slots > 0;
  const int32_t P = config_.kv.page_size_tokens;
  cache::StateSlotHandle slot;
  if (hybrid) {
    slot = state_slots_.Allocate();
    if (slot.empty()) return false;
  }
  auto* pre = std::get_if<state::Preempted>(&r->state);
  const bool swapped = pre != nullptr && !pre->swapped.empty();
  cache::PageList pages;
  int32_t computed = r->num_computed;
  r->restore_checkpoint.reset();
  if (!swapped) {
    cache::ExtendPageKeys(r->tokens, P, &r->keys);
    // The last token is always computed, so its logits exist.
    const int32_t max_pages = (r->num_tokens() - 1) / P;
    if (!hybrid && PrefixInFlight(*r, max_pages)) return false;
    cache::PrefixMatch match = kv_.Match(r->tokens, r->keys, max_pages, &plan_.copies);
    int32_t hit = match.num_tokens();
    if (hybrid) {  // linear layers restart from a checkpoint at the hit boundary
      const int32_t interval = config_.state.checkpoint_interval_pages;
      int32_t j = hit - hit % interval;
      auto usable = [&](uint64_t key) {  // written by an executed step, not just reserved
        return checkpoints_.Contains(key) &&
               std::find(pending_checkpoints_.begin(), pending_checkpoints_.end(), key) ==
                   pending_checkpoints_.end();
      };
      while (j > 0 && !usable(r->keys[j - 1])) j -= interval;
      match.pages.ReleaseTail(hit - j);
      hit = j;
      if (j > 0) r->restore_checkpoint = checkpoints_.Find(r->keys[j - 1]);
    }
    pages = std::move(match.pages);
    computed = hit * P;
  }
  int32_t n = std::min(r->num_tokens() - computed, budget_);
  if (config_.max_prefill_chunk_tokens > 0 && r->num_tokens() - computed > 1) {
    n = std::min(n, config_.max_prefill_chunk_tokens);
  }
  const int32_t held = swapped ? static_cast<int32_t>(pre->swapped.size())
                               : static_cast<int32_t>(pages.size());
  const int32_t extra = std::max(0, PagesFor(computed + n) - held);
  const int32_t need = extra + (swapped ? held : 0);
  const int32_t reserve = running_.empty() ? 0 : config_.admission_reserve_pages;
  while (kv_.num_available_pages() < need + reserve) {
    Request* victim = PickVictim(r);
    if (victim == nullptr) return false;  // `pages` and `slot` go back by destruction
    Preempt(victim);
  }
  if (swapped) PG_CHECK(kv_.SwapIn(&pre->swapped, &pages, &plan_.copies), "swap-in failed");
  PG_CHECK(kv_.Allocate(extra, &pages, &plan_.copies), "allocation after check failed");
  r->num_computed = computed;
  r->num_inserted_pages = swapped ? 0 : computed / P;
  if (!r->admitted_once) {
    r->admitted_once = true;
    r->num_cached_tokens = std::min(computed, r->num_prompt_tokens);
    stats_.prompt_tokens += r->num_prompt_tokens;
    stats_.cached_prompt_tokens += r->num_cached_tokens;
  }
  ApplyEvent(r->state, event::Admit{std::move(pages), std::move(slot), r->remaining()});
  waiting_.erase(r);
  running_.insert(r);
  AddEntry(r, n);
  return true;
}

// A running request is prefilling a page of r's prompt that is not in the prefix cache yet:
// the same prefix arrived twice close together (an agent's parallel calls on one context,
// choices of one prompt). r then waits for the page to be inserted rather than computing it a
// second time. The other request is running, so it progresses and the wait ends (if it is
// preempted or finishes early, it no longer counts). Chain keys: equal keys at page k mean
// equal tokens in pages 0..k.
bool Scheduler::PrefixInFlight(const Request& r, int32_t max_pages) const {
  const int32_t P = config_.kv.page_size_tokens;
  for (const Request* o : running_) {
    if (!std::holds_alternative<state::Prefilling>(o->state)) continue;
    const int32_t k = o->num_inserted_pages;  // o's next page to enter the cache
    if (k < max_pages && k < static_cast<int32_t>(o->keys.size()) && (k + 1) * P <= o->num_prompt_tokens &&
        o->keys[size_t(k)] == r.keys[size_t(k)])
      return true;
  }
  return false;
}

bool Scheduler::EnsurePages(Request* r, int32_t num_tokens) {
  cache::PageList* pages = PagesOf(r->state);
  const int32_t need = PagesFor(num_tokens) - static_cast<int32_t>(pages->size());
  if (need <= 0) return true;
  while (kv_.num_available_pages() < need) {
    Request* victim = PickVictim(r);
    if (victim == nullptr) return false;
    Preempt(victim);
  }
  PG_CHECK(kv_.Allocate(need, pages, &plan_.copies), "allocation after check failed");
  return true;
}

Scheduler::Request* Scheduler::PickVictim(const Request* requester) const {
  Request* best = nullptr;
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    Request* v = *it;
    if (!RankLess{}(requester, v)) break;  // only requests ranked strictly below
    if (config_.victim == VictimPolicy::kLowestRank) return v;
    if (best == nullptr || PagesOf(v->state)->size() > PagesOf(best->state)->size()) best = v;
  }
  return best;
}

void Scheduler::Preempt(Request* victim) {
  if (victim->planned_tokens > 0) {  // drop its entry from the plan being built
    for (size_t i = 0; i < entry_requests_.size(); ++i) {
      if (entry_requests_[i] != victim) continue;
      budget_ += plan_.entries[i].num_tokens;
      plan_.num_tokens -= plan_.entries[i].num_tokens;
      plan_.entries.erase(plan_.entries.begin() + i);
      entry_requests_.erase(entry_requests_.begin() + i);
      break;
    }
    victim->planned_tokens = 0;
  }
  cache::PageList* pages = PagesOf(victim->state);
  cache::HostSlotList swapped;
  const bool hybrid = config_.state.num_state_slots > 0;
  bool did_swap = false;
  if (config_.preemption == PreemptionMode::kSwap && !hybrid && victim->num_computed > 0) {
    pages->ReleaseTail(pages->size() - PagesFor(victim->num_computed));  // uncomputed pages
    did_swap = kv_.SwapOut(pages, &swapped, &plan_.copies);
  }
  if (did_swap) {
    ++stats_.num_swapped_out;
  } else {
    victim->num_computed = 0;  // recompute; its full pages stay in the prefix cache
    victim->num_inserted_pages = 0;
  }
  Released released = ApplyEvent(victim->state, event::Preempt{std::move(swapped)});
  running_.erase(victim);
  waiting_.insert(victim);
  plan_.preempted.push_back(victim->id);
  ++stats_.num_preemptions;
}  // `released` returns the device pages (and the state slot) here

void Scheduler::AddEntry(Request* r, int32_t n, int32_t num_draft) {
  PG_CHECK(n > 0 && n <= r->remaining() && n + num_draft <= budget_, "bad entry size {} + {}", n,
           num_draft);
  PG_CHECK(num_draft == 0 || r->remaining() == 1, "drafts for a request that is not decoding");
  PlanEntry e;
  e.id = r->id;
  e.first_position = r->num_computed;
  e.num_tokens = n + num_draft;
  e.num_draft = num_draft;
  e.num_sample = r->num_computed + n == r->num_tokens() ? 1 + num_draft : 0;
  e.is_decode = r->remaining() == 1;
  e.num_cached_tokens = r->num_cached_tokens;
  if (config_.state.num_state_slots > 0) {
    const int32_t P = config_.kv.page_size_tokens;
    const auto* slot = std::holds_alternative<state::Prefilling>(r->state)
                           ? &std::get<state::Prefilling>(r->state).state_slot
                           : &std::get<state::Decoding>(r->state).state_slot;
    e.state_slot = (*slot)[0];
    e.reset_state = e.first_position == 0;
    e.restore_checkpoint = r->restore_checkpoint;
    r->restore_checkpoint.reset();
    cache::ExtendPageKeys(r->tokens, P, &r->keys);
    const int32_t stride = P * config_.state.checkpoint_interval_pages;
    for (int32_t b = (e.first_position / stride + 1) * stride; b <= e.first_position + n;
         b += stride) {
      const uint64_t key = r->keys[b / P - 1];
      if (auto ck = checkpoints_.Reserve(key)) {
        e.state_saves.push_back({b, *ck});
        pending_checkpoints_.push_back(key);
      }
    }
  }
  plan_.entries.push_back(std::move(e));
  entry_requests_.push_back(r);
  r->planned_tokens = n + num_draft;
  budget_ -= n + num_draft;
  plan_.num_tokens += n + num_draft;
}

// ---- advancing ------------------------------------------------------------------------

void Scheduler::Advance(const StepResult& result, int64_t now_us) {
  PG_ENSURE(plan_outstanding_, kInvalidArgument, "Advance without an outstanding plan");
  // Validate everything before changing anything.
  std::unordered_map<RequestId, const SampledToken*> sampled;
  for (const SampledToken& s : result.sampled) {
    PG_ENSURE(sampled.emplace(s.id, &s).second, kInvalidArgument,
              "step {}: two sampled tokens for request {}", plan_.step, s.id);
  }
  size_t num_sampling = 0;
  for (const PlanEntry& e : plan_.entries) {
    if (e.num_sample == 0) continue;
    ++num_sampling;
    auto it = sampled.find(e.id);
    PG_ENSURE(it != sampled.end(), kInvalidArgument, "step {}: no sampled token for request {}",
              plan_.step, e.id);
    PG_ENSURE(it->second->num_accepted >= 0 && it->second->num_accepted <= e.num_draft,
              kInvalidArgument, "step {}: request {} accepted {} of {} drafts", plan_.step, e.id,
              it->second->num_accepted, e.num_draft);
  }
  PG_ENSURE(num_sampling == sampled.size(), kInvalidArgument,
            "step {}: {} sampled tokens for {} sampling entries", plan_.step, sampled.size(),
            num_sampling);
  now_us_ = std::max(now_us_, now_us);
  kv_.SetTime(now_us_);
  plan_outstanding_ = false;
  pending_checkpoints_.clear();
  ++stats_.num_steps;

  for (size_t i = 0; i < plan_.entries.size(); ++i) {
    const PlanEntry& e = plan_.entries[i];
    Request* r = entry_requests_[i];
    r->planned_tokens = 0;
    stats_.computed_tokens += e.num_tokens;
    const SampledToken* s = e.num_sample > 0 ? sampled.at(e.id) : nullptr;
    // The accepted drafts join the sequence; their KV (and the decode token's) is computed.
    // The rejected drafts' positions are past num_computed: overwritten before they are read.
    const int32_t accepted = s != nullptr ? s->num_accepted : 0;
    for (int32_t j = 1; j <= accepted; ++j) {
      r->tokens.push_back(e.input_tokens[size_t(j)]);
      updates_.push_back({.id = r->id, .token = r->tokens.back(),
                          .num_prompt_tokens = r->num_prompt_tokens,
                          .num_cached_tokens = r->num_cached_tokens,
                          .num_generated_tokens = r->num_generated()});
    }
    r->num_computed += e.num_tokens - (e.num_draft - accepted);
    if (e.num_draft > 0) {
      ++stats_.num_drafts;
      stats_.draft_tokens += e.num_draft;
      stats_.accepted_draft_tokens += accepted;
    }
    InsertComputedPages(r);
    if (s == nullptr) {
      ApplyEvent(r->state, event::Computed{r->remaining()});
    } else {
      r->tokens.push_back(s->token);
      RequestUpdate u;
      u.id = r->id;
      u.token = s->token;
      std::optional<FinishReason> finish;
      if (s->stop) finish = FinishReason::kStop;
      else if (r->num_generated() >= r->max_new_tokens) finish = FinishReason::kLength;
      else if (config_.max_context_tokens > 0 && r->num_tokens() >= config_.max_context_tokens)
        finish = FinishReason::kLength;
      u.num_prompt_tokens = r->num_prompt_tokens;
      u.num_cached_tokens = r->num_cached_tokens;
      u.num_generated_tokens = r->num_generated();
      if (finish) {
        u.finished = true;
        u.reason = *finish;
        updates_.push_back(u);
        FinishRequest(r, *finish, /*emit_update=*/false);
        continue;
      }
      updates_.push_back(u);
      ApplyEvent(r->state, event::Computed{r->remaining()});
    }
    if (r->abort_requested) FinishRequest(r, FinishReason::kAbort);
  }
  entry_requests_.clear();
}

void Scheduler::InsertComputedPages(Request* r) {
  const cache::PageList* pages = PagesOf(r->state);
  if (pages == nullptr) return;
  cache::ExtendPageKeys(r->tokens, config_.kv.page_size_tokens, &r->keys);
  const int32_t full = std::min({r->num_computed / config_.kv.page_size_tokens,
                                 static_cast<int32_t>(pages->size()),
                                 static_cast<int32_t>(r->keys.size())});
  if (full > r->num_inserted_pages) {
    kv_.Insert(r->tokens, r->keys, *pages, r->num_inserted_pages, full);
    r->num_inserted_pages = full;
  }
}

void Scheduler::FinishRequest(Request* r, FinishReason reason, bool emit_update) {
  if (emit_update) {
    RequestUpdate u;
    u.id = r->id;
    u.finished = true;
    u.reason = reason;
    u.num_prompt_tokens = r->num_prompt_tokens;
    u.num_cached_tokens = r->num_cached_tokens;
    u.num_generated_tokens = r->num_generated();
    updates_.push_back(u);
  }
  InsertComputedPages(r);
  running_.erase(r);
  waiting_.erase(r);
  Released released = ApplyEvent(r->state, event::Finish{reason});
  if (!r->session_id.empty() && config_.session_ttl_us > 0 && !released.pages.empty()) {
    kv_.ReleaseRetained(std::move(released.pages), now_us_ + config_.session_ttl_us);
  }
  requests_.erase(r->id);  // `r` is gone; `released` returns the rest on scope exit
}

std::vector<RequestUpdate> Scheduler::TakeUpdates() {
  std::vector<RequestUpdate> out;
  out.swap(updates_);
  return out;
}

// ---- introspection --------------------------------------------------------------------

SchedulerStats Scheduler::stats() const {
  SchedulerStats s = stats_;
  s.num_running = static_cast<int32_t>(running_.size());
  s.num_waiting = static_cast<int32_t>(waiting_.size());
  return s;
}

const char* Scheduler::RequestStateName(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : StateName(it->second->state);
}

void Scheduler::CheckInvariants() const {
  kv_.CheckInvariants();
  std::vector<int32_t> holders(kv_.num_pages(), 0);
  int32_t num_running = 0, num_waiting = 0;
  for (const auto& [id, rp] : requests_) {
    const Request& r = *rp;
    PG_CHECK(r.num_cached_tokens <= r.num_prompt_tokens, "request {}: cached {} > prompt {}", id,
             r.num_cached_tokens, r.num_prompt_tokens);
    PG_CHECK(r.num_generated() <= r.max_new_tokens, "request {} generated too much", id);
    if (IsRunning(r.state)) {
      ++num_running;
      PG_CHECK(running_.count(const_cast<Request*>(&r)), "running request {} not listed", id);
      const cache::PageList* pages = PagesOf(r.state);
      PG_CHECK(static_cast<int32_t>(pages->size()) >= PagesFor(r.num_computed),
               "request {}: {} pages for {} computed tokens", id, pages->size(), r.num_computed);
      PG_CHECK(r.remaining() >= 1, "running request {} has nothing left to compute", id);
      for (cache::PageId p : pages->ids()) ++holders[p];
    } else {
      ++num_waiting;
      PG_CHECK(waiting_.count(const_cast<Request*>(&r)), "waiting request {} not listed", id);
      if (std::holds_alternative<state::Queued>(r.state)) {
        PG_CHECK(r.num_computed == 0, "queued request {} has computed tokens", id);
      }
    }
  }
  PG_CHECK(num_running == static_cast<int32_t>(running_.size()) &&
               num_waiting == static_cast<int32_t>(waiting_.size()),
           "request lists out of sync");
  PG_CHECK(num_running <= config_.max_running_requests, "running cap exceeded");
  int32_t held = 0;
  for (cache::PageId p = 0; p < kv_.num_pages(); ++p) {
    PG_CHECK(kv_.ref_count(p) == holders[p], "page {}: refcount {} but {} holders", p,
             kv_.ref_count(p), holders[p]);
    held += holders[p] > 0 ? 1 : 0;
  }
  PG_CHECK(held + kv_.num_available_pages() == kv_.num_pages(), "pages not conserved");
}

}  // namespace pg::scheduler
