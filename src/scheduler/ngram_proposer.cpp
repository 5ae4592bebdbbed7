#include "scheduler/ngram_proposer.h"

#include <algorithm>

#include "core/status.h"

namespace pg::scheduler {

void ValidateSpeculativeConfig(const SpeculativeConfig& c) {
  PG_ENSURE(c.num_draft_tokens >= 0 && c.num_draft_tokens <= 64, kInvalidArgument,
            "num_speculative_tokens must be in [0, 64], got {}", c.num_draft_tokens);
  PG_ENSURE(c.min_ngram >= 1, kInvalidArgument, "prompt_lookup_min must be >= 1, got {}",
            c.min_ngram);
  PG_ENSURE(c.max_ngram >= c.min_ngram && c.max_ngram <= 64, kInvalidArgument,
            "prompt_lookup_max must be in [prompt_lookup_min ({}), 64], got {}", c.min_ngram,
            c.max_ngram);
}

int32_t ProposeNgramDrafts(std::span<const int32_t> tokens, const SpeculativeConfig& c,
                           int32_t max_tokens, std::vector<int32_t>* out) {
  const int64_t len = int64_t(tokens.size());
  if (max_tokens <= 0 || len < int64_t(c.min_ngram) + 1) return 0;
  const int32_t last = tokens[size_t(len - 1)];
  // A candidate is an earlier end position e (e <= len - 2, so a token follows it) with
  // tokens[e] == last; its match length is how many tokens before it agree with the suffix.
  int64_t best_end = -1;
  int32_t best_n = 0;
  for (int64_t e = len - 2; e >= 0; --e) {
    if (tokens[size_t(e)] != last) continue;
    int32_t n = 1;
    while (n < c.max_ngram && e - n >= 0 && tokens[size_t(e - n)] == tokens[size_t(len - 1 - n)]) ++n;
    if (n > best_n) {  // the latest occurrence of each length wins: ties keep the first seen
      best_n = n;
      best_end = e;
      if (n == c.max_ngram) break;
    }
  }
  if (best_n < c.min_ngram) return 0;
  const int64_t from = best_end + 1, to = std::min(len, from + int64_t(max_tokens));
  out->insert(out->end(), tokens.begin() + from, tokens.begin() + to);
  return int32_t(to - from);
}

}  // namespace pg::scheduler
