// TransferEngine data path: posting (direct or queued), polling (progress thread or a waiting
// caller), delivery of arrivals and completions, timeouts. See engine.h "Threads and
// ownership" and caller_poll.h.
//
// Lock discipline (one domain):
//  * `fabric` guards the provider, `pending` and `inflight`. It is held for one short pass
//    (post, poll, scan) and never while a callback, an expectation or OpCounter::Record runs.
//  * The progress thread only ever try_locks `fabric`, and stands off while another thread
//    wants it (`wanted`) or polled it recently (`caller_poll_ns`), so a caller's unlock never
//    has a sleeping waiter to wake.
//  * Lock order: `fabric` before `mu`; `mu` is never held while taking `fabric`.
#include "comm/transfer/engine_internal.h"
#include "core/log.h"
#include "core/status.h"

namespace pg::comm {
namespace {

// After a caller polled, the progress thread leaves the fabric to callers this long: a waiter
// that returns usually posts its answer and waits again within a few microseconds.
constexpr int64_t kCallerGraceNs = 20'000;
// A direct post tries the fabric lock this many times (one progress pass is ~0.1-1 µs) before
// handing the work to the progress thread instead.
constexpr int kDirectPostTries = 64;
constexpr int64_t kScanPeriodNs = 1'000'000;  // in-flight deadline scan

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Decrements an atomic counter on scope exit.
struct WantedGuard {
  std::atomic<int>& n;
  explicit WantedGuard(std::atomic<int>& c) : n(c) { n.fetch_add(1, std::memory_order_acq_rel); }
  ~WantedGuard() { n.fetch_sub(1, std::memory_order_release); }
};

}  // namespace

void TransferEngine::FinishFragment(const std::shared_ptr<OpState>& op_ptr, bool is_recv,
                                    const OpResult& r,
                                    std::vector<std::function<void()>>* deferred) {
  if (!op_ptr) return;  // submitted without a completion
  OpState& op = *op_ptr;
  if (!r.ok && !op.failed.exchange(true)) {
    std::lock_guard lock(op.mu);
    op.error = r.error;
  }
  if (is_recv) op.length_bytes = r.length_bytes;
  if (op.remaining.fetch_sub(1) != 1) return;
  OpResult final;
  final.ok = !op.failed.load();
  if (!final.ok) {
    std::lock_guard lock(op.mu);
    final.error = op.error;
  }
  final.length_bytes = op.length_bytes;
  if (deferred != nullptr && op.done.callback) {
    // Callback first, then the counter, as on the progress thread.
    deferred->push_back([op_ptr, final] {
      op_ptr->done.callback(final);
      if (op_ptr->done.counter) op_ptr->done.counter->Record(final);
    });
    return;
  }
  if (op.done.callback) op.done.callback(final);
  if (op.done.counter) op.done.counter->Record(final);
}

bool TransferEngine::PostLocked(Domain& d, WorkItem* item, Clock::time_point now,
                                std::vector<Finished>& failed) {
  const bool is_recv = item->kind == WorkItem::kRecv;
  if (now > item->deadline) {
    failed.push_back({item->op, is_recv,
                      {false, "timed out before the provider accepted the transfer", 0}});
    delete item;
    return true;
  }
  Provider& p = *d.provider;
  PostResult r = PostResult::kAgain;
  // A small write nobody waits on is injected: no local completion to generate and poll.
  const bool inject = config_.inject_writes && item->kind == WorkItem::kWrite && !item->op &&
                      item->write.length_bytes <= p.info().inject_bytes;
  try {
    if (inject) {
      r = p.InjectWrite(item->ep, item->write);
      if (r == PostResult::kPosted) {
        num_injected_.fetch_add(1, std::memory_order_relaxed);
        delete item;
        return true;
      }
      num_backpressure_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    switch (item->kind) {
      case WorkItem::kWrite: r = p.PostWrite(item->ep, item->write, item); break;
      case WorkItem::kSend: r = p.PostSend(item->ep, item->msg, item); break;
      case WorkItem::kRecv: r = p.PostRecv(item->ep, item->msg, item); break;
    }
  } catch (const Error& e) {
    failed.push_back({item->op, is_recv, {false, e.what(), 0}});
    delete item;
    return true;
  }
  if (r == PostResult::kAgain) {
    num_backpressure_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  d.AddInflight(item);  // its completion can only be polled under this same lock
  return true;
}

void TransferEngine::DrainLocked(Domain& d, std::vector<ProviderEvent>& events,
                                 std::vector<Finished>& finished) {
  const size_t first = events.size();
  try {
    d.provider->Poll(events);
  } catch (const Error& e) {
    PG_LOG_ERROR("transfer engine domain {}: {}", d.index, e.what());
  }
  // Keep the arrivals in `events`; local completions leave `inflight` into `finished`.
  size_t keep = first;
  for (size_t i = first; i < events.size(); ++i) {
    ProviderEvent& ev = events[i];
    if (ev.kind == ProviderEvent::kRemoteImm) {
      if (keep != i) events[keep] = std::move(ev);
      ++keep;
      continue;
    }
    auto* item = static_cast<WorkItem*>(ev.context);
    if (item == nullptr || !item->in_flight) {
      PG_LOG_WARN("transfer engine: completion for unknown context ({})", ev.error);
      continue;
    }
    d.RemoveInflight(item);
    if (!item->abandoned) {
      finished.push_back({item->op, item->kind == WorkItem::kRecv,
                          {ev.kind != ProviderEvent::kLocalError, std::move(ev.error),
                           ev.length_bytes}});
    }
    delete item;
  }
  events.resize(keep);
}

void TransferEngine::Deliver(Domain& d, std::vector<ProviderEvent>& events,
                             std::vector<Finished>& finished, bool on_progress) {
  std::vector<std::function<void()>> deferred;
  auto* out = on_progress ? nullptr : &deferred;
  for (const ProviderEvent& ev : events) imms_.Arrive(ev.imm, 1, out);
  for (const Finished& f : finished) FinishFragment(f.op, f.is_recv, f.result, out);
  events.clear();
  finished.clear();
  if (deferred.empty()) return;
  {
    std::lock_guard lock(d.mu);
    for (auto& fn : deferred) d.deferred.push_back(std::move(fn));
    d.has_work.store(true, std::memory_order_release);
  }
  d.cv.notify_all();
}

void TransferEngine::Wake(Domain& d) {
  {
    std::lock_guard lock(d.mu);
    d.has_work.store(true, std::memory_order_release);
  }
  d.cv.notify_all();
}

void TransferEngine::Enqueue(uint32_t domain, WorkItem* const* items, size_t n) {
  Domain& d = *domains_[domain];
  {
    std::lock_guard lock(d.mu);
    d.num_submitted.fetch_add(n, std::memory_order_acq_rel);
    d.submitted.insert(d.submitted.end(), items, items + n);
    d.has_work.store(true, std::memory_order_release);
  }
  d.cv.notify_all();
}

void TransferEngine::PostOrQueue(uint32_t domain, WorkItem* const* items, size_t n,
                                 Clock::time_point now) {
  Domain& d = *domains_[domain];
  if (config_.direct_post && d.num_submitted.load(std::memory_order_acquire) == 0 &&
      !d.has_pending.load(std::memory_order_acquire)) {
    std::vector<Finished> failed;
    bool posted = false, left = false;
    {
      std::unique_lock lk(d.fabric, std::try_to_lock);
      if (!lk.owns_lock()) {
        // Contended: raise `wanted` (the progress thread then stops trying the lock) while
        // retrying for a bounded time. Uncontended posts leave that shared line alone.
        WantedGuard want(d.wanted);
        for (int i = 0; i < kDirectPostTries && !lk.try_lock(); ++i) CpuRelax();
      }
      // Re-checked under the lock: an item queued earlier (by this thread too) must go first.
      if (lk.owns_lock() && d.num_submitted.load(std::memory_order_acquire) == 0 &&
          d.pending.empty()) {
        size_t i = 0;
        for (; i < n; ++i) {
          if (!PostLocked(d, items[i], now, failed)) break;  // EAGAIN: the rest waits, in order
        }
        num_direct_posts_.fetch_add(i, std::memory_order_relaxed);
        for (; i < n; ++i) d.pending.push_back(items[i]);
        left = !d.pending.empty();
        if (left) d.has_pending.store(true, std::memory_order_release);
        posted = true;
      }
    }
    if (posted) {
      // The progress thread retries what is left, and polls our completions: wake it if it
      // sleeps (a futex call only then).
      if (left || d.sleeping.load(std::memory_order_acquire)) Wake(d);
      if (!failed.empty()) {
        std::vector<ProviderEvent> none;
        Deliver(d, none, failed, /*on_progress=*/false);
      }
      return;
    }
  }
  Enqueue(domain, items, n);
}

bool TransferEngine::TryInjectNow(const WriteRequest& req) {
  if (!config_.direct_post || !config_.inject_writes) return false;
  Domain& d = *domains_[req.domain_];
  Provider& p = *d.provider;
  if (req.op_.length_bytes > p.info().inject_bytes ||
      d.num_submitted.load(std::memory_order_acquire) != 0 ||
      d.has_pending.load(std::memory_order_acquire)) {
    return false;
  }
  std::unique_lock lk(d.fabric, std::try_to_lock);
  // Same order rule as PostOrQueue: nothing queued may be overtaken.
  if (!lk.owns_lock() || d.num_submitted.load(std::memory_order_acquire) != 0 ||
      !d.pending.empty()) {
    return false;
  }
  const uint32_t ep = PickEndpoint();
  WriteOp op = req.op_;
  op.dst = req.peer_addrs_[ep];
  PostResult r = PostResult::kAgain;
  try {
    r = p.InjectWrite(ep, op);
  } catch (const Error&) {
    return false;  // the ordinary path posts it again and owns the outcome
  }
  if (r == PostResult::kAgain) {
    num_backpressure_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  lk.unlock();
  num_injected_.fetch_add(1, std::memory_order_relaxed);
  num_direct_posts_.fetch_add(1, std::memory_order_relaxed);
  // The provider may need progress to push it out (rxm/tcp): wake a sleeping progress thread.
  if (d.sleeping.load(std::memory_order_acquire)) Wake(d);
  return true;
}

void TransferEngine::RunOnDomain(uint32_t domain, const std::function<void()>& fn) {
  Domain& d = *domains_[domain];
  WantedGuard want(d.wanted);
  std::lock_guard lk(d.fabric);
  fn();
}

bool TransferEngine::PollOnce() {
  thread_local std::vector<ProviderEvent> events;
  thread_local std::vector<Finished> finished;
  bool any = false;
  const int64_t now_ns = NowNs();
  for (auto& dp : domains_) {
    Domain& d = *dp;
    // The progress thread reads this line while it spins: write it only every few µs.
    if (now_ns - d.caller_poll_ns.load(std::memory_order_relaxed) > kCallerGraceNs / 4) {
      d.caller_poll_ns.store(now_ns, std::memory_order_relaxed);
    }
    std::unique_lock lk(d.fabric, std::try_to_lock);
    if (!lk.owns_lock()) continue;  // someone else is reading this domain's CQs right now
    DrainLocked(d, events, finished);
    lk.unlock();
    if (events.empty() && finished.empty()) continue;
    any = true;
    num_caller_deliveries_.fetch_add(events.size() + finished.size(), std::memory_order_relaxed);
    Deliver(d, events, finished, /*on_progress=*/false);
  }
  return any;
}

void TransferEngine::ProgressLoop(Domain& d) {
  std::vector<ProviderEvent> events;
  std::vector<Finished> finished;
  std::vector<std::function<void()>> deferred;
  std::vector<WorkItem*> submitted;  // taken from d.submitted, not yet in d.pending
  const int64_t spin_ns = int64_t(config_.spin_before_sleep_us) * 1000;
  int64_t last_activity = NowNs();
  int64_t last_scan = last_activity;
  for (;;) {
    bool active = false;
    const bool idle = NowNs() - last_activity > spin_ns;
    if (d.has_work.load(std::memory_order_acquire) || idle) {
      std::unique_lock lock(d.mu);
      d.has_work.store(false, std::memory_order_relaxed);
      if (d.submitted.empty() && d.deferred.empty() && submitted.empty() && !d.stop &&
          !d.has_pending.load(std::memory_order_acquire) && NowNs() - last_activity > spin_ns) {
        d.sleeping.store(true, std::memory_order_release);
        d.cv.wait_for(lock, std::chrono::microseconds(config_.idle_sleep_us));
        d.sleeping.store(false, std::memory_order_release);
      }
      if (d.stop) {
        // Hand back what was taken; the destructor fails it.
        d.submitted.insert(d.submitted.begin(), submitted.begin(), submitted.end());
        return;
      }
      submitted.insert(submitted.end(), d.submitted.begin(), d.submitted.end());
      d.submitted.clear();
      deferred.swap(d.deferred);
    }
    for (auto& fn : deferred) fn();
    active = active || !deferred.empty();
    deferred.clear();

    const auto now = Clock::now();
    const int64_t now_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
    const bool scan_due = now_ns - last_scan > kScanPeriodNs;
    const bool must = !submitted.empty() || d.has_pending.load(std::memory_order_acquire) ||
                      scan_due;
    const bool callers_polling =
        d.wanted.load(std::memory_order_acquire) > 0 ||
        now_ns - d.caller_poll_ns.load(std::memory_order_relaxed) < kCallerGraceNs;
    std::unique_lock lk(d.fabric, std::defer_lock);
    if ((callers_polling && !must) || !lk.try_lock()) {
      if (active) last_activity = now_ns;
      // Back off a little: the lines read above are written by callers on the hot path.
      for (int i = 0; i < 16; ++i) CpuRelax();
      continue;
    }
    for (WorkItem* item : submitted) d.pending.push_back(item);
    d.num_submitted.fetch_sub(submitted.size(), std::memory_order_acq_rel);
    active = active || !submitted.empty();
    submitted.clear();
    // Post in FIFO order; stop at the first EAGAIN (backpressure) and poll.
    while (!d.pending.empty()) {
      WorkItem* item = d.pending.front();
      if (!PostLocked(d, item, now, finished)) break;
      d.pending.pop_front();
      active = true;
    }
    d.has_pending.store(!d.pending.empty(), std::memory_order_release);
    DrainLocked(d, events, finished);
    if (scan_due) {
      last_scan = now_ns;
      for (WorkItem* item = d.inflight; item != nullptr; item = item->next) {
        if (!item->abandoned && now > item->deadline) {
          item->abandoned = true;  // stays in `inflight` until the provider releases it
          finished.push_back({item->op, item->kind == WorkItem::kRecv,
                              {false,
                               fmt::format("no completion within {} ms (peer dead?)",
                                           config_.op_timeout.count()),
                               0}});
        }
      }
    }
    lk.unlock();
    active = active || !events.empty() || !finished.empty();
    Deliver(d, events, finished, /*on_progress=*/true);
    if (active) last_activity = NowNs();
  }
}

}  // namespace pg::comm
