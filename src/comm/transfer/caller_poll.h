// Waiting by polling: a thread that waits for a transfer (an immediate, an OpCounter) may drive
// the fabric itself for a bounded time instead of sleeping until the progress thread hands the
// event over. That removes one thread hand-off from every small-message round trip.
//
// Contract of CallerPoller::PollOnce (implemented by TransferEngine):
//  * callable from any thread, any number at once; at most one thread reads a domain's CQs at a
//    time (a domain held by someone else is skipped, never waited for);
//  * arrivals and counter-only completions are delivered on the calling thread; completion
//    callbacks and ImmCounters expectations found this way are handed to the progress thread,
//    so callbacks still run there only (never inside the waiter's own locks).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace pg::comm {

class CallerPoller {
 public:
  virtual ~CallerPoller() = default;
  // One pass over every domain whose fabric is free. Returns true when it delivered events.
  virtual bool PollOnce() = 0;
};

// Spins for at most `spin` (and never past `deadline`), polling through `poller` between checks,
// until `ready()` holds. Returns ready()'s last value. With no poller or a zero spin it only
// checks once.
template <typename Ready>
bool SpinPoll(CallerPoller* poller, std::chrono::microseconds spin,
              std::chrono::steady_clock::time_point deadline, Ready&& ready) {
  if (ready()) return true;
  if (poller == nullptr || spin.count() <= 0) return false;
  const auto end = std::min(deadline, std::chrono::steady_clock::now() + spin);
  for (uint32_t i = 1;; ++i) {
    poller->PollOnce();
    if (ready()) return true;
    // The clock is read every 8 polls (a poll with nothing to read costs ~0.1 µs).
    if (i % 8 == 0 && std::chrono::steady_clock::now() >= end) return false;
  }
}

}  // namespace pg::comm
