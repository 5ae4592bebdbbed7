// Merging the split partials of the absorbed MLA decode (mla_decode.cu writes them; its
// combine kernel and the fused merge + W_UV of mla_fused.cu read them).
//
// A query row r with num_splits splits has, per split i: partial_ml[(r * num_splits + i) * 2]
// = the split's running max m_i (log2 domain) and [.. + 1] = its sum l_i of exp2(s - m_i);
// partial_acc[(r * num_splits + i) * kMlaRank + c] = its unnormalised output column c. The
// merged row is sum_i exp2(m_i - M) acc_i / sum_i exp2(m_i - M) l_i, M = max_i m_i (computed
// online per warp, MlaMergeWarp, and across warps, MlaMergeWarps).
// Only the first MlaUsedSplits(kv_len, num_splits, min_chunk) splits hold keys (the others never wrote).
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/mla/mla_params.h"

namespace pg::cuda {

inline constexpr float kMlaNoMax = -1e30f;  // running max before any key (finite: no inf - inf)

// Splits of a kv_len-key row that hold keys (MlaSplitChunk rounds chunks up to tiles).
__device__ __forceinline__ int MlaUsedSplits(int kv_len, int num_splits, int min_chunk) {
  const int chunk = MlaSplitChunk(kv_len, num_splits, min_chunk);
  return min(num_splits, (kv_len + chunk - 1) / chunk);
}

// One warp's share of a row's merge, online: splits first, first + stride, ... < n (n = the
// row's used splits), kMlaMergeGroup of them loaded at once (their ml pairs and partial rows
// together: one round trip per group, not a max pass and then one per split). Returns, relative
// to the warp's running max m (log2 domain; kMlaNoMax when it saw no split):
//   acc[q] = sum_i exp2(m_i - m) acc_i   columns q * 128 + lane * 4 .. + 3 (kMlaRank = 512)
//   l      = sum_i exp2(m_i - m) l_i
// acc_row = partial_acc of the row's split 0. Warps' results meet through MlaMergeWarps.
inline constexpr int kMlaMergeGroup = 4;
__device__ __forceinline__ void MlaMergeWarp(const float* ml, const float* acc_row, int n,
                                             int first, int stride, int lane, float4 (&acc)[4],
                                             float& m, float& l) {
  static_assert(kMlaRank == 4 * 128, "four float4 columns per lane");
#pragma unroll
  for (int q = 0; q < 4; ++q) acc[q] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  m = kMlaNoMax;
  l = 0.0f;
  for (int i0 = first; i0 < n; i0 += kMlaMergeGroup * stride) {
    float mi[kMlaMergeGroup], li[kMlaMergeGroup];
    float4 v[kMlaMergeGroup][4];
#pragma unroll
    for (int g = 0; g < kMlaMergeGroup; ++g) {
      const int i = i0 + g * stride;
      const bool ok = i < n;
      mi[g] = ok ? ml[2 * i] : kMlaNoMax;
      li[g] = ok ? ml[2 * i + 1] : 0.0f;
      const float4* src = reinterpret_cast<const float4*>(acc_row + int64_t(ok ? i : 0) * kMlaRank);
#pragma unroll
      for (int q = 0; q < 4; ++q) v[g][q] = ok ? src[q * 32 + lane] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    float mg = m;
#pragma unroll
    for (int g = 0; g < kMlaMergeGroup; ++g) mg = fmaxf(mg, mi[g]);
    const float sc = exp2f(m - mg);  // 1 while nothing was seen (both kMlaNoMax)
    l *= sc;
#pragma unroll
    for (int q = 0; q < 4; ++q) acc[q].x *= sc, acc[q].y *= sc, acc[q].z *= sc, acc[q].w *= sc;
#pragma unroll
    for (int g = 0; g < kMlaMergeGroup; ++g) {
      const float w = exp2f(mi[g] - mg);  // absent splits: v = 0, li = 0
      l += w * li[g];
#pragma unroll
      for (int q = 0; q < 4; ++q)
        acc[q].x += w * v[g][q].x, acc[q].y += w * v[g][q].y, acc[q].z += w * v[g][q].z,
            acc[q].w += w * v[g][q].w;
    }
    m = mg;
  }
}

// Column c of the merged (normalised) row from nw warps' MlaMergeWarp results in shared
// memory: red[w * kMlaRank + c], m[w], l[w] (w < nw). 0 for a row with no keys.
__device__ __forceinline__ float MlaMergeWarps(const float* red, const float* m, const float* l,
                                               int nw, int c) {
  float mx = kMlaNoMax;
  for (int w = 0; w < nw; ++w) mx = fmaxf(mx, m[w]);
  float num = 0.0f, den = 0.0f;
  for (int w = 0; w < nw; ++w) {
    const float s = exp2f(m[w] - mx);
    num += s * red[w * kMlaRank + c];
    den += s * l[w];
  }
  return den > 0.0f ? num / den : 0.0f;
}

}  // namespace pg::cuda
