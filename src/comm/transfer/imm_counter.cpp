#include "comm/transfer/imm_counter.h"

#include "core/status.h"

namespace pg::comm {

void ImmCounters::Collect(Slot& slot, std::vector<std::function<void()>>& ready) {
  size_t served = 0;
  while (served < slot.pending.size() && slot.available >= slot.pending[served].count) {
    slot.available -= slot.pending[served].count;
    ready.push_back(std::move(slot.pending[served].fn));
    ++served;
  }
  slot.pending.erase(slot.pending.begin(), slot.pending.begin() + served);
}

void ImmCounters::Arrive(uint32_t imm, int64_t n,
                         std::vector<std::function<void()>>* ready_out) {
  std::vector<std::function<void()>> ready;
  {
    std::lock_guard lock(mu_);
    Slot& slot = slots_[imm];
    slot.available += n;
    Collect(slot, ready);
  }
  arrivals_.fetch_add(uint64_t(n), std::memory_order_release);
  cv_.notify_all();
  if (ready_out) {
    for (auto& fn : ready) ready_out->push_back(std::move(fn));
    return;
  }
  for (auto& fn : ready) fn();
}

void ImmCounters::Wait(uint32_t imm, int64_t count, std::chrono::milliseconds timeout) {
  PG_CHECK(count >= 0);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // Polling phase: TryConsume (a lock) only when the lock-free arrival count moved.
  uint64_t seen = ~uint64_t(0);
  const bool got = SpinPoll(poller_, spin_, deadline, [&] {
    const uint64_t now_seen = arrivals();
    if (now_seen == seen) return false;
    seen = now_seen;
    return TryConsume(imm, count);
  });
  if (got) return;
  std::unique_lock lock(mu_);
  Slot& slot = slots_[imm];
  // Expectations queued earlier are served first; a waiter only takes what is left.
  bool ok = cv_.wait_until(lock, deadline,
                           [&] { return slot.pending.empty() && slot.available >= count; });
  if (!ok) {
    Throw(ErrorCode::kCancelled, "timed out after {} ms waiting for {} immediates {:#x} ({} came)",
          timeout.count(), count, imm, slot.available);
  }
  slot.available -= count;
}

bool ImmCounters::TryConsume(uint32_t imm, int64_t count) {
  std::lock_guard lock(mu_);
  Slot& slot = slots_[imm];
  if (!slot.pending.empty() || slot.available < count) return false;
  slot.available -= count;
  return true;
}

void ImmCounters::Expect(uint32_t imm, int64_t count, std::function<void()> fn) {
  std::vector<std::function<void()>> ready;
  {
    std::lock_guard lock(mu_);
    Slot& slot = slots_[imm];
    slot.pending.push_back({count, std::move(fn)});
    Collect(slot, ready);
  }
  for (auto& f : ready) f();
}

void ImmCounters::CancelExpectations(uint32_t imm) {
  std::lock_guard lock(mu_);
  auto it = slots_.find(imm);
  if (it != slots_.end()) it->second.pending.clear();
}

int64_t ImmCounters::Available(uint32_t imm) const {
  std::lock_guard lock(mu_);
  auto it = slots_.find(imm);
  return it == slots_.end() ? 0 : it->second.available;
}

}  // namespace pg::comm
