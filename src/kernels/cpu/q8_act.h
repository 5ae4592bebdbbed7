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

// Activation row for the AVX-512 VNNI Q8_0 kernel (matmul_gemv_vnni.cpp), k = 32 * nb values:
//   qs: [nb * 32] int8 in element order, x[i] ≈ ds[2b] * q[i] (QuantizeActAvx2's rounding);
//   ds: [nb * 2] f32, per block {d, d * Σ q} (the second folds weight offsets).
struct ActPairs {
  int8_t* qs;
  float* ds;
};
void QuantizeActPairs(const float* x, int64_t k, const ActPairs& out);

// The same with int16 values, for the Q4 kernels, always in the Q4 pair order: an odd last
// block is paired with a zero block (qs: (nb + 1) / 2 * 64 values, ds: (nb + 1) / 2 * 4). 8-bit
// activations flip near-ties of the reference's greedy path on SmolLM2 (margins ~0.2), 16-bit
// ones do not, and decode is bound by weight bandwidth, not by these dot products.
// |q| <= kAct16Max = 127 * 128, so a block whose amax is 127 gets d = 1/128 exactly
// (integer-valued inputs stay exact) and 32 products of a nibble fit easily in int32.
inline constexpr int32_t kAct16Max = 127 * 128;
struct ActPairs16 {
  int16_t* qs;
  float* ds;
};
void QuantizeActPairs16(const float* x, int64_t k, const ActPairs16& out);

}  // namespace pg::ops::cpu
