// Helpers shared by the constrained-output tests: the ids a constraint's indexed mask keeps,
// and the ids Allowed() accepts one by one (the two must agree).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

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

}  // namespace pg::runtime
