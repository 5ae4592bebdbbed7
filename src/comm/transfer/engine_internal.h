// TransferEngine internals shared by engine.cpp (API, registration, request building) and
// engine_progress.cpp (posting, polling, delivery, the progress thread). Not a public header.
#pragma once

#include <deque>
#include <thread>

#include "comm/transfer/engine.h"

namespace pg::comm {

using Clock = std::chrono::steady_clock;

// One submitted operation (a write, a batch, a paged write, a send or a receive); it completes
// when its last fragment (WorkItem) does.
struct TransferEngine::OpState {
  std::atomic<int> remaining{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::string error;
  size_t length_bytes = 0;
  Completion done;
  std::shared_ptr<void> keep_alive;  // e.g. the counter an internal op reports to
};

// One provider operation. Owned by exactly one place at a time: the domain's `submitted`
// queue, its `pending` deque or its `inflight` set, then deleted by whoever removes it there.
struct TransferEngine::WorkItem {
  alignas(16) uint8_t provider_context[kProviderContextBytes];  // must stay first
  enum Kind { kWrite, kSend, kRecv } kind = kWrite;
  WriteOp write;
  MsgOp msg;
  uint32_t ep = 0;
  std::shared_ptr<OpState> op;  // null: nobody wants to hear about completion
  Clock::time_point deadline = Clock::time_point::max();
  bool abandoned = false;  // already reported failed by timeout; awaiting provider release
  // Membership of the domain's in-flight list (intrusive: no allocation per post).
  bool in_flight = false;
  WorkItem* prev = nullptr;
  WorkItem* next = nullptr;
};

// A fragment result found under the fabric lock, delivered after it is released (its WorkItem
// is gone by then: only the op it belongs to is kept).
struct TransferEngine::Finished {
  std::shared_ptr<OpState> op;
  bool is_recv = false;
  OpResult result;
};

struct TransferEngine::Domain {
  uint32_t index = 0;
  std::unique_ptr<Provider> provider;
  std::thread thread;

  // --- fabric lock: provider calls, `pending`, `inflight` ------------------------------
  std::mutex fabric;
  std::deque<WorkItem*> pending;           // accepted from callers, not yet posted (FIFO)
  // Posted, completion not yet polled: a doubly linked list through WorkItem::prev/next.
  WorkItem* inflight = nullptr;
  void AddInflight(WorkItem* item) {
    item->in_flight = true;
    item->prev = nullptr;
    item->next = inflight;
    if (inflight) inflight->prev = item;
    inflight = item;
  }
  void RemoveInflight(WorkItem* item) {
    item->in_flight = false;
    if (item->prev) item->prev->next = item->next; else inflight = item->next;
    if (item->next) item->next->prev = item->prev;
  }
  // Threads other than the progress thread that want the fabric now (it stands off).
  std::atomic<int> wanted{0};
  // steady_clock nanoseconds of the last caller poll: the progress thread stands off for a
  // grace period after it, so a waiter that returns and posts again keeps the fabric.
  std::atomic<int64_t> caller_poll_ns{0};
  // !pending.empty(), readable without the fabric lock.
  std::atomic<bool> has_pending{false};

  // --- queue from callers: `mu` -------------------------------------------------------
  std::mutex mu;
  std::condition_variable cv;
  std::vector<WorkItem*> submitted;
  // Completions and expectations found by caller polls, run by the progress thread.
  std::vector<std::function<void()>> deferred;
  bool stop = false;
  std::atomic<bool> sleeping{false};  // the progress thread is in its idle wait (set under mu)
  // Set (release) whenever submitted/deferred/stop change, so a hot progress loop only takes
  // `mu` when there is something to take.
  std::atomic<bool> has_work{false};
  // Items in `submitted` or taken from it but not yet in `pending`. A direct post needs it to
  // be 0 (and `pending` empty): then nothing submitted earlier can still be ahead of it.
  std::atomic<size_t> num_submitted{0};
};

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

}  // namespace pg::comm
