// Synthetic agentic conversations in the shape of the evalscope SWE-smith dataset: a long
// first turn (system prompt + task + repository files + tool output, ~first_turn_tokens), then
// turns that each add ~turn_growth_tokens of new tool output (code, test logs, diffs, stack
// traces). Deterministic: conversation i depends only on (seed, i) and the token counter, so a
// run with more conversations extends a run with fewer instead of reshuffling it.
#pragma once

#include <cstdint>

#include "bench/dataset.h"
#include "bench/token_counter.h"

namespace pg::bench {

struct SyntheticParams {
  int num_conversations = 1;
  int64_t first_turn_tokens = 50000;  // target for system + first user message, in tokens
  int64_t turn_growth_tokens = 800;   // target for each later turn's new message, in tokens
  int min_turns = 10;                 // turns per conversation: uniform in [min_turns, max_turns]
  int max_turns = 15;
  uint64_t seed = 0;
  int first_conversation = 0;  // index of the first conversation to generate (for slicing)
};

// Each turn's new content measures at most its target and within a few tokens of it under
// `counter` (text is cut at the largest prefix that fits). Turn.prompt_tokens holds the running
// sum of the deltas' counts (no chat template, no assistant replies).
// Throws pg::Error(kInvalidArgument) for targets/turn ranges that make no sense.
Dataset GenerateSynthetic(const SyntheticParams& params, TokenCounter& counter);

// The generator's random source: SplitMix64, identical on every platform and library (the
// standard distributions are not), exposed for tests.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  // Uniform integer in [lo, hi] (inclusive); hi >= lo.
  int64_t Uniform(int64_t lo, int64_t hi);

 private:
  uint64_t state_;
};

}  // namespace pg::bench
