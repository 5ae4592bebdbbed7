// Token sampling on the CPU: penalties, temperature, top-k, top-p, min-p, seeded RNG,
// logprobs. Order (as vLLM): penalties -> temperature -> top-k -> top-p -> min-p -> draw.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/sampling_params.h"

namespace pg::runtime {

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;                              // of the chosen token, raw model logits
  std::vector<std::pair<int32_t, float>> top;        // top_logprobs alternatives, best first
};

// Per-request sampling state: the RNG and token counts for penalties.
class SamplerState {
 public:
  SamplerState(const SamplingParams& params, std::span<const int32_t> prompt, uint64_t fallback_seed);
  void Accept(int32_t token);  // record a generated token

  const SamplingParams& params() const { return params_; }
  std::mt19937_64& rng() { return rng_; }
  const std::unordered_map<int32_t, int>& generated_counts() const { return generated_; }
  const std::unordered_map<int32_t, bool>& seen() const { return seen_; }  // prompt + generated

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int> generated_;
  std::unordered_map<int32_t, bool> seen_;
};

// Samples one token from `logits` ([vocab], raw model output; modified in place).
SampledToken Sample(std::span<float> logits, SamplerState& state);

}  // namespace pg::runtime
