#include "scheduler/request_fsm.h"

#include <optional>
#include <utility>

#include "core/status.h"

namespace pg::scheduler {
namespace {

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

// Running state for `remaining` tokens left, built from resources handed on.
RequestState Running(int32_t remaining, cache::PageList pages, cache::StateSlotHandle slot) {
  if (remaining == 1) return state::Decoding{std::move(pages), std::move(slot)};
  return state::Prefilling{std::move(pages), std::move(slot)};
}

}  // namespace

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "?";
}

const char* StateName(const RequestState& s) {
  constexpr const char* kNames[] = {"Queued", "Prefilling", "Decoding", "Preempted", "Finished"};
  return kNames[s.index()];
}

const char* EventName(const RequestEvent& e) {
  constexpr const char* kNames[] = {"Admit", "Computed", "Preempt", "Finish"};
  return kNames[e.index()];
}

Released ApplyEvent(RequestState& s, RequestEvent e) {
  const char* state_name = StateName(s);
  const char* event_name = EventName(e);
  auto remaining_ok = [&](int32_t remaining) {
    PG_ENSURE(remaining > 0, kInvalidArgument, "{} in state {} with {} remaining tokens",
              event_name, state_name, remaining);
  };
  Released released;
  std::optional<RequestState> next;  // set by a legal transition
  std::visit(
      Overloaded{
          [&](state::Queued&, event::Admit& ev) {
            remaining_ok(ev.num_remaining_tokens);
            next = Running(ev.num_remaining_tokens, std::move(ev.pages), std::move(ev.state_slot));
          },
          [&](state::Preempted& st, event::Admit& ev) {
            remaining_ok(ev.num_remaining_tokens);
            PG_ENSURE(st.swapped.empty(), kInvalidArgument,
                      "Admit of a swapped-out request before its KV was swapped in");
            next = Running(ev.num_remaining_tokens, std::move(ev.pages), std::move(ev.state_slot));
          },
          [&](state::Prefilling& st, event::Computed& ev) {
            remaining_ok(ev.num_remaining_tokens);
            next = Running(ev.num_remaining_tokens, std::move(st.pages), std::move(st.state_slot));
          },
          [&](state::Decoding& st, event::Computed& ev) {
            PG_ENSURE(ev.num_remaining_tokens == 1, kInvalidArgument,
                      "Computed in state Decoding must leave exactly 1 token, got {}",
                      ev.num_remaining_tokens);
            (void)st;  // stays Decoding, keeps its resources
          },
          [&](auto& st, event::Preempt& ev)
            requires(std::is_same_v<std::decay_t<decltype(st)>, state::Prefilling> ||
                     std::is_same_v<std::decay_t<decltype(st)>, state::Decoding>) {
            released.pages = std::move(st.pages);
            released.state_slot = std::move(st.state_slot);
            next = state::Preempted{std::move(ev.swapped)};
          },
          [&](state::Finished&, event::Finish&) {
            Throw(ErrorCode::kInvalidArgument, "Finish of a request already finished");
          },
          [&](auto& st, event::Finish& ev) {
            if constexpr (requires { st.pages; }) {
              released.pages = std::move(st.pages);
              released.state_slot = std::move(st.state_slot);
            }
            if constexpr (requires { st.swapped; }) released.swapped = std::move(st.swapped);
            next = state::Finished{ev.reason};
          },
          [&](auto&, auto&) {
            Throw(ErrorCode::kInvalidArgument, "illegal event {} in request state {}",
                  event_name, state_name);
          },
      },
      s, e);
  if (next) s = std::move(*next);
  return released;
}

const cache::PageList* PagesOf(const RequestState& s) {
  if (auto* p = std::get_if<state::Prefilling>(&s)) return &p->pages;
  if (auto* d = std::get_if<state::Decoding>(&s)) return &d->pages;
  return nullptr;
}

cache::PageList* PagesOf(RequestState& s) {
  return const_cast<cache::PageList*>(PagesOf(std::as_const(s)));
}

}  // namespace pg::scheduler
