// Prompt-lookup ("n-gram") drafts for speculative decoding: the model tends to repeat what its
// context already holds (an agent rewriting a file it just read, quoting tool output, code
// edits), so the tokens that followed the latest earlier occurrence of the sequence's last n
// tokens are a cheap guess at what comes next. No draft model, no state: a scan of the tokens.
//
// Pure (no clock, no I/O), used by the scheduler when it plans a decode (scheduler.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pg::scheduler {

struct SpeculativeConfig {
  // Draft tokens proposed per decode step and request; 0 = speculative decoding off.
  int32_t num_draft_tokens = 0;
  // n-gram lengths tried, longest first: a draft needs the last n tokens (min_n <= n <= max_n)
  // to have occurred earlier in the sequence.
  int32_t min_ngram = 3;  // measured better than 2 on a compute-bound CPU (docs/PERF.md)
  int32_t max_ngram = 4;
  bool enabled() const { return num_draft_tokens > 0; }
};

// Throws pg::Error(kInvalidArgument) naming the field for a config that cannot work.
void ValidateSpeculativeConfig(const SpeculativeConfig& config);

// Drafts continuing `tokens` (a request's prompt and generated tokens): for the longest n in
// [min_ngram, max_ngram] whose n-gram ending at the last token occurred before, the tokens
// following its latest earlier occurrence (the one ending closest to the end), up to
// `max_tokens` of them and never past the end of `tokens`. Appends them to *out and returns
// how many (0: no earlier occurrence of even min_ngram tokens). O(len(tokens) * max_ngram)
// worst case; the scan goes backwards from the end and stops at the first max_ngram match.
int32_t ProposeNgramDrafts(std::span<const int32_t> tokens, const SpeculativeConfig& config,
                           int32_t max_tokens, std::vector<int32_t>* out);

}  // namespace pg::scheduler
