// Merging the split partials of the absorbed MLA decode (mla_decode.cu writes them; its
// combine kernel and the fused merge + W_UV of mla_fused.cu read them).
//
// A query row r with num_splits splits has, per split i: partial_ml[(r * num_splits + i) * 2]
// = the split's running max m_i (log2 domain) and [.. + 1] = its sum l_i of exp2(s - m_i);
// partial_acc[(r * num_splits + i) * kMlaRank + c] = its unnormalised output column c. The
// merged row is sum_i exp2(m_i - M) acc_i / sum_i exp2(m_i - M) l_i, M = max_i m_i.
// Only the first MlaUsedSplits(kv_len, num_splits) splits hold keys (the others never wrote).
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/mla/mla_params.h"

namespace pg::cuda {

inline constexpr float kMlaNoMax = -1e30f;  // running max before any key (finite: no inf - inf)

// Splits of a kv_len-key row that hold keys (MlaSplitChunk rounds chunks up to tiles).
__device__ __forceinline__ int MlaUsedSplits(int kv_len, int num_splits) {
  const int chunk = MlaSplitChunk(kv_len, num_splits);
  return min(num_splits, (kv_len + chunk - 1) / chunk);
}

// Warp-wide (every lane gets it): M over the row's n used splits; ml = the row's partial_ml.
__device__ __forceinline__ float MlaSplitMax(const float* ml, int n, int lane) {
  float mx = kMlaNoMax;
  for (int i = lane; i < n; i += 32) mx = fmaxf(mx, ml[2 * i]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  return mx;
}

// Warp-wide: the merged denominator sum_i exp2(m_i - mx) l_i.
__device__ __forceinline__ float MlaSplitDenominator(const float* ml, int n, float mx, int lane) {
  float l = 0.0f;
  for (int i = lane; i < n; i += 32) l += exp2f(ml[2 * i] - mx) * ml[2 * i + 1];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
  return l;
}

// One warp's share of the merged numerator: splits first, first + stride, ... < n, weighted by
// exp2(m_i - mx); acc[q] holds columns q * 128 + lane * 4 .. + 3 (q < 4: kMlaRank = 512).
// acc_row = partial_acc of the row's split 0.
__device__ __forceinline__ void MlaAccumulateSplits(const float* ml, const float* acc_row, int n,
                                                    float mx, int first, int stride, int lane,
                                                    float4 (&acc)[4]) {
  static_assert(kMlaRank == 4 * 128, "four float4 columns per lane");
#pragma unroll
  for (int q = 0; q < 4; ++q) acc[q] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int i = first; i < n; i += stride) {
    const float w = exp2f(ml[2 * i] - mx);
    const float4* src = reinterpret_cast<const float4*>(acc_row + int64_t(i) * kMlaRank);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 v = src[q * 32 + lane];
      acc[q].x += w * v.x, acc[q].y += w * v.y, acc[q].z += w * v.z, acc[q].w += w * v.w;
    }
  }
}

}  // namespace pg::cuda
