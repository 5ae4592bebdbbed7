// The engine as its callers (CLI, server, benchmarks) see it: submit a tokenized request
// with sampling parameters, receive streamed token events on a callback, abort at will.
//
// Threading: Submit/Abort/Stats may be called from any thread. Callbacks run on the engine
// loop thread; they must not block (copy the event and post it to your own executor).
// Every submitted request receives exactly one final event (finished == true), whatever
// happens: completion, abort, or error.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/sampling_params.h"

namespace pg::engine {

using RequestId = uint64_t;

// Sampling parameters live in the runtime (the sampler consumes them).
using SamplingParams = runtime::SamplingParams;

struct Request {
  std::vector<int32_t> prompt_tokens;
  SamplingParams sampling;
  std::string session_id;  // optional: conversation id for KV retention
  int priority = 0;        // higher runs first under pressure
};

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* FinishReasonName(FinishReason r);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // (token, logprob), best first
};

struct TokenEvent {
  RequestId id = 0;
  std::vector<int32_t> tokens;          // newly generated tokens (may be empty)
  std::vector<TokenLogprob> logprobs;   // parallel to tokens when requested
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;                    // set when finish_reason == kError
  int num_prompt_tokens = 0;
  int num_cached_tokens = 0;            // prompt tokens served from the prefix cache
  int num_generated_tokens = 0;         // total so far
};

using EventCallback = std::function<void(const TokenEvent&)>;

struct EngineStats {
  int num_running = 0;
  int num_waiting = 0;
  int64_t kv_pages_total = 0;
  int64_t kv_pages_free = 0;
  int64_t prefix_cache_hit_tokens = 0;   // cumulative
  int64_t prompt_tokens = 0;             // cumulative
  int64_t generated_tokens = 0;          // cumulative
  // Speculative decoding, cumulative: decode steps that carried drafts, their draft tokens,
  // and the drafts accepted.
  int64_t spec_drafts = 0;
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
};

struct ModelInfo {
  std::string name;
  int max_context_tokens = 0;
  int vocab_size = 0;
  std::vector<int32_t> eos_token_ids;
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Queues a request. Throws pg::Error(kInvalidArgument / kOutOfRange / kResourceExhausted)
  // synchronously for a request that can never run (prompt too long, queue full); then no
  // callback is made.
  virtual RequestId Submit(Request request, EventCallback on_event) = 0;
  // Aborts a request if still running; its final event has finish_reason kAbort. Idempotent.
  virtual void Abort(RequestId id) = 0;
  virtual EngineStats Stats() const = 0;
  virtual const ModelInfo& model_info() const = 0;
  // Stops accepting, aborts or finishes running work (drain), joins the loop thread.
  virtual void Shutdown(bool drain) = 0;
};

}  // namespace pg::engine
