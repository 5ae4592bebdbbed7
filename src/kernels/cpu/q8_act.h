// Activation rows quantized to int8 blocks for the integer dot-product GEMV kernels.
// Our own layout (not ggml's): 32 values per block, x[i] ≈ d * qs[i], qs in [-127, 127],
// `sum` = Σ qs (lets Q4_0 / Q4_1 fold their offsets into one multiply per block).
#pragma once

#include <cstdint>

namespace pg::ops::cpu {

struct ActBlock {
  float d;
  int32_t sum;
  int8_t qs[32];
};
static_assert(sizeof(ActBlock) == 40);

// x: [k] f32, k % 32 == 0 -> out: [k / 32] blocks. Round to nearest (ties to even).
void QuantizeActScalar(const float* x, ActBlock* out, int64_t k);
void QuantizeActAvx2(const float* x, ActBlock* out, int64_t k);

}  // namespace pg::ops::cpu
