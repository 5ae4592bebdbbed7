// Token sampling on the CPU: penalties, temperature, top-k, top-p, min-p, seeded RNG,
// logprobs. Order (as vLLM): penalties -> temperature -> top-k -> top-p -> min-p -> draw.
// The algorithm and RNG are kernels/sample_math.h's (shared with ops::Sample on the device):
// draw number `step` of a request with seed s uses SampleUniform(s, step).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/ops_sample.h"
#include "runtime/token_mask.h"
#include "runtime/sampling_params.h"

namespace pg::runtime {

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;                              // of the chosen token, raw model logits
  std::vector<std::pair<int32_t, float>> top;        // top_logprobs alternatives, best first
};

// Per-request sampling state: the seed, the draw counter and token counts for penalties.
class SamplerState {
 public:
  SamplerState(const SamplingParams& params, std::span<const int32_t> prompt, uint64_t fallback_seed);
  void Accept(int32_t token);  // record a generated token

  const SamplingParams& params() const { return params_; }
  uint64_t seed() const { return seed_; }
  uint32_t step() const { return step_; }  // tokens accepted so far
  // The op-level row of this request at its current step (no counts row).
  ops::SampleRow Row() const;
  const std::unordered_map<int32_t, int>& generated_counts() const { return generated_; }
  const std::unordered_map<int32_t, bool>& seen() const { return seen_; }  // prompt + generated
  // The output constraint (params().token_table set: JSON mode or a schema), else null.
  // Sample masks with it.
  const OutputConstraint* constraint() const { return constraint_.get(); }

 private:
  SamplingParams params_;
  uint64_t seed_ = 0;
  uint32_t step_ = 0;
  std::unordered_map<int32_t, int> generated_;
  std::unordered_map<int32_t, bool> seen_;
  std::unique_ptr<OutputConstraint> constraint_;
};

// Samples one token from `logits` ([vocab], raw model output; modified in place). The request's
// logit_bias is added first; in JSON mode the tokens that cannot continue the object are then
// masked; logprobs stay those of the raw logits.
SampledToken Sample(std::span<float> logits, SamplerState& state);

// Speculative decoding's verification (scheduler/plan.h, PlanEntry::num_draft): `rows` holds
// 1 + drafts.size() logit rows of `vocab` floats (positions of [last token, drafts...]; modified
// in place). Samples row i with `state` (advanced per token) as plain decoding would at that
// step, appends it to *out and stops at the first sample that differs from drafts[i], or after
// the last row. Returns the number of tokens appended (1 + the accepted drafts): a caller
// reading *out back finds the same count by the same rule.
int SampleSpeculative(std::span<float> rows, int vocab, std::span<const int32_t> drafts,
                      SamplerState& state, std::vector<SampledToken>* out);

}  // namespace pg::runtime
