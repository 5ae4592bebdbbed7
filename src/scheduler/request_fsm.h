// Request lifecycle as a state machine (DESIGN.md example 1).
//
//            Admit                 Computed (remaining == 1)
//   Queued ---------> Prefilling -------------------------> Decoding --+
//     |                 |   ^  \__ Computed (remaining > 1)    |   ^   | Computed
//     |                 |   |                                  |   +---+
//     |       Preempt   v   | Admit          Preempt           |
//     |              Preempted <-------------------------------+
//     |                 |
//     +-----------------+------ Finish (any live state) ------> Finished{reason}
//
// "remaining" = tokens whose KV is not computed yet; a running request with one remaining
// token (the last sampled one) is decoding. States that hold KV pages, a recurrent-state slot
// or swapped host slots own them through move-only handles, so a transition either hands
// them on to the next state or returns them in `Released`; nothing can leak.
#pragma once

#include <cstdint>
#include <variant>

#include "cache/handles.h"

namespace pg::scheduler {

using RequestId = uint64_t;

enum class FinishReason { kStop, kLength, kAbort, kError };
const char* FinishReasonName(FinishReason reason);

namespace state {
struct Queued {};
struct Prefilling {
  cache::PageList pages;              // covers at least the computed tokens
  cache::StateSlotHandle state_slot;  // hybrid models only
};
struct Decoding {
  cache::PageList pages;
  cache::StateSlotHandle state_slot;
};
struct Preempted {
  cache::HostSlotList swapped;  // KV of every page when swapped out; empty when recomputing
};
struct Finished {
  FinishReason reason = FinishReason::kStop;
};
}  // namespace state

using RequestState = std::variant<state::Queued, state::Prefilling, state::Decoding,
                                  state::Preempted, state::Finished>;

namespace event {
struct Admit {  // Queued | Preempted -> Prefilling | Decoding
  cache::PageList pages;
  cache::StateSlotHandle state_slot;
  int32_t num_remaining_tokens = 0;  // > 0
};
struct Computed {  // Prefilling | Decoding -> Prefilling | Decoding
  int32_t num_remaining_tokens = 0;  // > 0 (a finished request gets Finish instead)
};
struct Preempt {  // Prefilling | Decoding -> Preempted
  cache::HostSlotList swapped;  // filled by the caller when swapping, else empty
};
struct Finish {  // any live state -> Finished
  FinishReason reason = FinishReason::kStop;
};
}  // namespace event

using RequestEvent = std::variant<event::Admit, event::Computed, event::Preempt, event::Finish>;

// What a transition gives back. The caller returns it to the cache with its own policy
// (e.g. session retention); if it just drops it, the handles return everything anyway.
struct Released {
  cache::PageList pages;
  cache::StateSlotHandle state_slot;
  cache::HostSlotList swapped;
};

// Applies `event` to `state` in place. Throws pg::Error(kInvalidArgument) naming the state
// and the event for an illegal pair; `state` is unchanged then.
Released ApplyEvent(RequestState& state, RequestEvent event);

const char* StateName(const RequestState& state);
const char* EventName(const RequestEvent& event);

// The KV pages a state holds (empty for states without KV).
const cache::PageList* PagesOf(const RequestState& state);
cache::PageList* PagesOf(RequestState& state);
inline bool IsRunning(const RequestState& s) {
  return std::holds_alternative<state::Prefilling>(s) || std::holds_alternative<state::Decoding>(s);
}

}  // namespace pg::scheduler
