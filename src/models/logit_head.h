// The end of every decoder: the last sub-layer's output is added to the residual stream for
// the rows that need logits only, then the final RMSNorm and the output projection. Built
// from ops, so it runs on whatever device the tensors live on.
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace pg::models {

struct LogitHeadParams {
  TensorView residual;                  // [n, hidden] residual stream before the last add
  TensorView last;                      // optional [n, hidden] last sub-layer's output, not yet
                                        // added (data == nullptr: residual is the final stream)
  std::span<const int32_t> logit_rows;  // m ascending rows of [0, n)
  TensorView gathered;                  // scratch, at least [m, hidden] (used with last only)
  TensorView normed;                    // scratch, at least [m, hidden]
  TensorView norm_weight;               // [hidden]
  float eps = 1e-5f;
  TensorView output;                    // [vocab, hidden]
  TensorView logits;                    // [m, vocab]
};

void RunLogitHead(const LogitHeadParams& p);

}  // namespace pg::models
