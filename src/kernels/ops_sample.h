// Token sampling as a kernel-layer op (issue 6: sampling on the device). Same conventions as
// ops.h. The algorithm, per-row parameters and RNG are defined once in sample_math.h; the
// CPU reference (ref/sample_ref.cpp) is also the host sampler's code (runtime/sampler.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/tensor.h"
#include "kernels/sample_math.h"

namespace pg::ops {

// tokens[r] = a token sampled from row r of `logits` under rows[r] (sample_math.h).
struct SampleParams {
  TensorView logits;        // [n, vocab] raw model logits: f32 (CPU); bf16 or f32 (CUDA); read only
  TensorView rows;          // [n, kSampleRowWords] i32; row r's bytes are a SampleRow (RowsOf)
  TensorView token_counts;  // optional [num_count_rows, vocab] i32 (sample_math.h encoding),
                            // read by rows with counts_row >= 0 (distinct rows per row)
  TensorView tokens;        // [n] i32, out
  TensorView logprobs;      // optional [n] f32, out: log_softmax(raw logits)[token]
  bool update_counts = false;  // then token_counts[counts_row, token] += 2 (one generation)
};
void Sample(const SampleParams& p);

// The SampleRow array behind SampleParams::rows.
inline const SampleRow* RowsOf(const TensorView& rows) {
  return static_cast<const SampleRow*>(rows.data);
}

// Chooses one token from penalised logits x ([vocab]) under `row` with the uniform `u`
// (steps 2-4 of sample_math.h). The CPU code of the algorithm; host sampler and reference.
int32_t ChooseToken(std::span<const float> x, const SampleRow& row, double u);

// max(x) (NaNs skipped unless x[0] is one), vectorized.
float MaxOf(std::span<const float> x);
// log(sum(exp(x))) for the host sampler's logprobs: exps by a float polynomial (relative error
// ~2e-7 a term, vectorized), summed in double; |error| ~1e-6 against double exps. ~20x faster
// than std::exp in double over a 150K-token row.
float LogSumExp(std::span<const float> x);

void Validate(const SampleParams& p);
Device DeviceOf(const SampleParams& p);
std::string_view OpName(const SampleParams&);

}  // namespace pg::ops
