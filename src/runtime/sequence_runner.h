// Runs one sequence on a model with its own KV pages: chunked prefill, then decode steps.
// Used by `peregrine generate`/`chat`/`bench decode` and by the model golden tests; the
// serving path goes through the engine (scheduler + shared paged cache) instead.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "models/model.h"
#include "runtime/kv_storage.h"
#include "runtime/sampler.h"

namespace pg::runtime {

struct SequenceRunnerOptions {
  int max_context = 0;        // tokens; 0 = the model's context length
  int page_size = 16;         // tokens per KV page
  int prefill_chunk = 512;    // tokens per forward during prefill
};

class SequenceRunner {
 public:
  SequenceRunner(models::Model& model, SequenceRunnerOptions options);

  // Appends tokens to the sequence and runs them; returns the logits after the last one
  // ([vocab], valid until the next call). Throws kOutOfRange past max_context.
  std::span<float> Append(std::span<const int32_t> tokens);
  int length() const { return length_; }
  int max_context() const { return options_.max_context; }
  void Reset() { length_ = 0; }
  // Drops tokens after `length` (re-use of a common prefix, as in a chat).
  void Truncate(int length);

 private:
  models::Model& model_;
  SequenceRunnerOptions options_;
  std::unique_ptr<KvStorage> kv_;
  std::vector<int32_t> page_table_;
  Tensor logits_;
  int length_ = 0;
};

struct GenerateOptions {
  int max_new_tokens = 128;
  std::vector<int32_t> stop_ids;  // generation stops after emitting one of these
};

// Prefills `prompt` (continuing the runner's sequence) and samples up to max_new_tokens;
// on_token(token) is called for each; returns the generated tokens.
std::vector<int32_t> Generate(SequenceRunner& runner, std::span<const int32_t> prompt,
                              SamplerState& sampler, const GenerateOptions& options,
                              const std::function<void(int32_t)>& on_token = {});

}  // namespace pg::runtime
