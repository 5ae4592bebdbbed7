// Counts immediates (remote CQ data) by value. Arrivals may come before anyone asks for them:
// they accumulate, and a later Wait/Expect consumes them. Thread-safe; the progress thread (or
// a waiter polling the fabric, see caller_poll.h) calls Arrive, any thread waits.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "comm/transfer/caller_poll.h"

namespace pg::comm {

class ImmCounters {
 public:
  // Records `n` arrivals of `imm`; fires callbacks whose expected counts are now met, or, with
  // `ready_out`, appends them there for the caller to run elsewhere.
  void Arrive(uint32_t imm, int64_t n = 1,
              std::vector<std::function<void()>>* ready_out = nullptr);
  // Blocks until `count` arrivals of `imm` are available, then consumes them. With a poller
  // set, it first polls the fabric itself for up to its spin time, then sleeps. Throws
  // pg::Error(kCancelled) naming the imm and the shortfall when `timeout` passes first.
  void Wait(uint32_t imm, int64_t count, std::chrono::milliseconds timeout);
  // Set once by the owning engine before any Wait: who to poll and for how long.
  void SetPoller(CallerPoller* poller, std::chrono::microseconds spin) {
    poller_ = poller;
    spin_ = spin;
  }
  // Non-blocking: consumes `count` arrivals if present.
  bool TryConsume(uint32_t imm, int64_t count);
  // Calls `fn` (on the arriving thread, or now if already satisfied) once `count` arrivals of
  // `imm` exist; consumes them. Expectations on one imm are served in order.
  void Expect(uint32_t imm, int64_t count, std::function<void()> fn);
  // Drops every pending expectation on `imm` (their callbacks never run). For owners that go
  // away after a failed exchange.
  void CancelExpectations(uint32_t imm);
  // Arrivals not consumed yet.
  int64_t Available(uint32_t imm) const;
  // Total arrivals of any value so far. Busy-waiters poll this lock-free and call TryConsume
  // only when it moved, so they never contend with the progress thread for the lock.
  uint64_t arrivals() const { return arrivals_.load(std::memory_order_acquire); }

 private:
  struct Expectation {
    int64_t count;
    std::function<void()> fn;
  };
  struct Slot {
    int64_t available = 0;
    std::vector<Expectation> pending;  // FIFO
  };
  // Pops satisfied expectations of `slot` (lock held); returns their callbacks.
  static void Collect(Slot& slot, std::vector<std::function<void()>>& ready);

  std::atomic<uint64_t> arrivals_{0};
  CallerPoller* poller_ = nullptr;
  std::chrono::microseconds spin_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<uint32_t, Slot> slots_;
};

}  // namespace pg::comm
