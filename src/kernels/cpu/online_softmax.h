// The CPU attention kernels' shared pieces (attention.cpp, mla_attention.cpp): the online
// softmax step of flash attention and fixed-order dot products. Every function carries the
// AVX2 target attribute (simd_avx2.h): callers run after a Features().avx2 check.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/simd_avx2.h"

namespace pg::ops::cpu {

// FoldSoftmaxBlock's value update of acc[i0, i0 + 8 V): acc = fma(w_j, v_j, s_j * acc) over
// the keys j in order, s_j = corr for the first, else 1.
template <int V, class ValueRow>
PG_TARGET_AVX2 inline void FoldValues(const float* w, int64_t j_begin, int64_t j_end,
                                      const ValueRow& value_row, float corr, int64_t i0,
                                      float* acc) {
  __m256 a[V];
  for (int v = 0; v < V; ++v) a[v] = _mm256_loadu_ps(acc + i0 + 8 * v);
  if (j_begin < j_end) {
    const float* x = value_row(j_begin) + i0;
    const __m256 vw = _mm256_set1_ps(w[j_begin]), vc = _mm256_set1_ps(corr);
    for (int v = 0; v < V; ++v)
      a[v] = _mm256_fmadd_ps(vw, _mm256_loadu_ps(x + 8 * v), _mm256_mul_ps(vc, a[v]));
  }
  for (int64_t j = j_begin + 1; j < j_end; ++j) {
    const float* x = value_row(j) + i0;
    const __m256 vw = _mm256_set1_ps(w[j]);
    for (int v = 0; v < V; ++v) a[v] = _mm256_fmadd_ps(vw, _mm256_loadu_ps(x + 8 * v), a[v]);
  }
  for (int v = 0; v < V; ++v) _mm256_storeu_ps(acc + i0 + 8 * v, a[v]);
}

// Folds one block of a query row's logits into its running state (flash attention):
// scores[j_begin, j_end) hold the logits (bmax: their max) and become e^(s_j - m'); with
// m' = max(m, bmax), acc (d values) = acc * e^(m - m') + Σ_j e^(s_j - m') · value_row(j) and
// l = l * e^(m - m') + Σ_j e^(s_j - m'), in order of j. acc starts zeroed, m at -inf, l at 0.
template <class ValueRow>
PG_TARGET_AVX2 inline void FoldSoftmaxBlock(float* scores, int64_t j_begin, int64_t j_end,
                                            float bmax, const ValueRow& value_row, int64_t d,
                                            float& m, float& l, float* acc) {
  const float m_new = std::max(m, bmax);
  const float corr = std::exp(m - m_new);  // 0 on the first block (m = -inf)
  int64_t j = j_begin;
  const __m256 vm = _mm256_set1_ps(m_new);
  for (; j + 8 <= j_end; j += 8)
    _mm256_storeu_ps(scores + j, simd::Exp(_mm256_sub_ps(_mm256_loadu_ps(scores + j), vm)));
  for (; j < j_end; ++j) scores[j] = std::exp(scores[j] - m_new);
  float lsum = 0;
  for (j = j_begin; j < j_end; ++j) lsum += scores[j];
  // Per element of acc, in order of j: acc = fma(w_j, v_j[i], s_j * acc) with s_j = corr for
  // the first j, else 1 (the ScaleAxpy sequence; 1 * acc = acc exactly, so it is left out),
  // 64 elements at a time held in registers over the block's keys; the d % 8 tail by
  // ScaleAxpy itself.
  const int64_t d8 = d / 8 * 8;
  int64_t i0 = 0;
  for (; i0 + 64 <= d8; i0 += 64) FoldValues<8>(scores, j_begin, j_end, value_row, corr, i0, acc);
  for (; i0 < d8; i0 += 8) FoldValues<1>(scores, j_begin, j_end, value_row, corr, i0, acc);
  if (d8 < d)
    for (j = j_begin; j < j_end; ++j)
      simd::ScaleAxpy(acc + d8, j == j_begin ? corr : 1.0f, scores[j], value_row(j) + d8, d - d8);
  l = l * corr + lsum;
  m = m_new;
}

// out[i] = Σ_k a[k] · b[i][k] for N rows b[i], n >= 0 values each. Every instance sums in the
// same order (two 8-lane accumulators over 16-value steps, one more 8-value step, the
// horizontal sum, then a scalar tail), so a dot's value does not depend on N: callers that
// take rows four at a time with single-row tails stay batch-invariant.
template <int N>
PG_TARGET_AVX2 inline void DotRows(const float* a, const float* const* b, int64_t n, float* out) {
  __m256 acc0[N], acc1[N];
  for (int i = 0; i < N; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m256 a0 = _mm256_loadu_ps(a + k), a1 = _mm256_loadu_ps(a + k + 8);
    for (int i = 0; i < N; ++i) {
      acc0[i] = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b[i] + k), acc0[i]);
      acc1[i] = _mm256_fmadd_ps(a1, _mm256_loadu_ps(b[i] + k + 8), acc1[i]);
    }
  }
  if (k + 8 <= n) {
    const __m256 a0 = _mm256_loadu_ps(a + k);
    for (int i = 0; i < N; ++i) acc0[i] = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b[i] + k), acc0[i]);
    k += 8;
  }
  for (int i = 0; i < N; ++i) {
    float s = simd::HSum(_mm256_add_ps(acc0[i], acc1[i]));
    for (int64_t kk = k; kk < n; ++kk) s = std::fma(a[kk], b[i][kk], s);
    out[i] = s;
  }
}

// out[j] = Σ_k a[k] · row(j)[k] for j in [0, count): rows four at a time (DotRows: the same
// values as one at a time).
template <class Row>
PG_TARGET_AVX2 inline void DotMany(const float* a, const Row& row, int64_t count, int64_t n,
                                   float* out) {
  int64_t j = 0;
  for (; j + 4 <= count; j += 4) {
    const float* b[4] = {row(j), row(j + 1), row(j + 2), row(j + 3)};
    DotRows<4>(a, b, n, out + j);
  }
  for (; j < count; ++j) {
    const float* b[1] = {row(j)};
    DotRows<1>(a, b, n, out + j);
  }
}

}  // namespace pg::ops::cpu
