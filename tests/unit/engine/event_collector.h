// Test helper: collects one engine request's streamed events (engine/api.h). Wait() returns
// the whole result once the final event arrived; WaitFirst() once the first token (or the
// final event) did. Callbacks run on the engine's loop thread; reads take the same lock.
#pragma once

#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/api.h"

namespace pg::engine::test_util {

struct Result {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  FinishReason reason = FinishReason::kNone;
  int cached = 0;  // prompt tokens served from the prefix cache
  std::string error;
};

class Collector {
 public:
  EventCallback Callback() {
    return [this](const TokenEvent& ev) {
      std::lock_guard<std::mutex> lock(mu_);
      r_.tokens.insert(r_.tokens.end(), ev.tokens.begin(), ev.tokens.end());
      r_.logprobs.insert(r_.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
      if (!ev.tokens.empty()) SetFirst();
      if (ev.finished) {
        r_.reason = ev.finish_reason;
        r_.cached = ev.num_cached_tokens;
        r_.error = ev.error;
        SetFirst();
        done_.set_value();
      }
    };
  }
  Result Wait() {
    done_.get_future().wait();
    std::lock_guard<std::mutex> lock(mu_);
    return r_;
  }
  void WaitFirst() { first_.get_future().wait(); }

 private:
  void SetFirst() {  // under mu_
    if (!first_set_) first_set_ = true, first_.set_value();
  }
  std::mutex mu_;
  Result r_;
  std::promise<void> first_;
  bool first_set_ = false;
  std::promise<void> done_;
};

// Submits every request at once and waits for all of them; results in request order.
inline std::vector<Result> RunAll(Engine& e, const std::vector<Request>& requests) {
  std::vector<std::unique_ptr<Collector>> cs;
  for (const Request& r : requests) {
    cs.push_back(std::make_unique<Collector>());
    e.Submit(r, cs.back()->Callback());
  }
  std::vector<Result> out;
  for (auto& c : cs) out.push_back(c->Wait());
  return out;
}

}  // namespace pg::engine::test_util
