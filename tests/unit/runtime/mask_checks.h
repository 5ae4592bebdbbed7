// Helpers shared by the constrained-output tests: the ids a constraint's indexed mask keeps,
// the ids Allowed() accepts one by one (the two must agree), and seeded walks that check so at
// every step.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/token_mask.h"

namespace pg::runtime {

inline std::vector<int32_t> AllowedIds(const OutputConstraint& c, size_t vocab) {
  std::vector<float> logits(vocab, 0.0f);
  c.Mask(logits);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < vocab; ++i)
    if (std::isfinite(logits[i])) ids.push_back(int32_t(i));
  return ids;
}

inline std::vector<int32_t> AllowedOneByOne(const OutputConstraint& c, size_t vocab) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < int32_t(vocab); ++id)
    if (c.Allowed(id)) ids.push_back(id);
  return ids;
}

// One seeded walk (T = 1) through p's constraint over `table`: at every step the mask must keep
// exactly what Allowed() accepts, and something; `logits` sets each step's row (all 0 before).
// Stops at token 0 (EOS in these tables) or after max_steps; ended says which. A failed check is
// a test failure, and the walk stops there. at_end (if set) sees the constraint at the end.
struct Walk {
  std::string text;
  bool ended = false;
};
template <class LogitsFn>
Walk CheckedWalk(SamplingParams p, uint64_t seed, int max_steps, LogitsFn logits, const std::string& what,
                 const std::function<void(const OutputConstraint&)>& at_end = {}) {
  p.temperature = 1.0f;
  p.seed = seed;
  const TokenTable& table = *p.token_table;
  const size_t vocab = table.bytes.size();
  SamplerState st(p, {}, 0);
  Walk w;
  for (int step = 0; step < max_steps && !w.ended; ++step) {
    const std::vector<int32_t> brute = AllowedOneByOne(*st.constraint(), vocab);
    if (brute.empty() || AllowedIds(*st.constraint(), vocab) != brute) {
      ADD_FAILURE() << what << ": " << (brute.empty() ? "nothing allowed" : "mask != Allowed()") << " after '"
                    << w.text << "'";
      return w;
    }
    std::vector<float> row(vocab, 0.0f);
    logits(row);
    const SampledToken t = Sample(row, st);
    w.ended = t.token == 0;
    if (!w.ended) w.text += table.bytes[size_t(t.token)];
  }
  if (at_end) at_end(*st.constraint());
  return w;
}

}  // namespace pg::runtime
