// MlaAttention's weight products on Q8_0 rows as stored (ops_moe.h, the split w_k_b / w_v_b
// form of llama.cpp's deepseek2 files), dequantized in registers: w = f32(d) * q, exact in
// f32 (an f16 scale times an int8), so every product, and with the f32 path's summation order
// every sum, equals the f32 path's over the dequantized matrix (mla_attention.cpp):
//   * AbsorbQueriesQ8: q_abs = W_UK_hᵀ q_nope as ScaleAxpy over e = 0, 1, ... (per latent
//     column c one fma chain acc = fma(q[e], W_UK_h[e, c], acc) from acc = 0);
//   * DotManyQ8: out[j] = o_lat · W_UV_h[j, :] in DotRows' order (online_softmax.h).
// Q8_0 rows are whole blocks of 32, so nope and kv_lora_rank are multiples of 32 here and the
// f32 routines' 8-value steps and scalar tails never run. Every function carries the AVX2
// target attribute: callers run after a Features().avx2 check.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/quant.h"
#include "kernels/cpu/simd_avx2.h"

namespace pg::ops::cpu {

// The 8 x 32 int8 tile rows[i][e] (i < 8, e < 32) transposed into t[e * 8 + i].
PG_TARGET_AVX2 inline void TransposeTile8x32(const int8_t* const rows[8], int8_t* t) {
  __m256i r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[i]));
  // Per 128-bit lane (e in [16 L, 16 L + 16)): bytes of row pairs, then quads, then all 8.
  __m256i a[8], b[8];
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = _mm256_unpacklo_epi8(r[2 * i], r[2 * i + 1]);      // e 0..7: (i0, i1) pairs
    a[2 * i + 1] = _mm256_unpackhi_epi8(r[2 * i], r[2 * i + 1]);  // e 8..15
  }
  for (int g = 0; g < 2; ++g)      // rows 0..3 (g 0) and 4..7 (g 1)
    for (int h = 0; h < 2; ++h) {  // e 0..7 (h 0) and 8..15 (h 1)
      const __m256i x = a[4 * g + h], y = a[4 * g + 2 + h];
      b[4 * g + 2 * h] = _mm256_unpacklo_epi16(x, y);      // e 8h + 0..3: 4-row quads
      b[4 * g + 2 * h + 1] = _mm256_unpackhi_epi16(x, y);  // e 8h + 4..7
    }
  // b[k] (rows 0..3) and b[4 + k] (rows 4..7) hold the quads of e 4k..4k+3 (lane offsets);
  // their epi32 interleave gives the 8 bytes of e 4k, 4k+1 (lo) and 4k+2, 4k+3 (hi).
  for (int k = 0; k < 4; ++k) {
    const __m256i lo = _mm256_unpacklo_epi32(b[k], b[4 + k]);
    const __m256i hi = _mm256_unpackhi_epi32(b[k], b[4 + k]);
    // Lane 0 holds e = 4k.., lane 1 e = 16 + 4k..; 8 bytes per e.
    _mm_storeu_si128(reinterpret_cast<__m128i*>(t + 8 * (4 * k)), _mm256_castsi256_si128(lo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(t + 8 * (4 * k + 2)), _mm256_castsi256_si128(hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(t + 8 * (16 + 4 * k)),
                     _mm256_extracti128_si256(lo, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(t + 8 * (16 + 4 * k + 2)),
                     _mm256_extracti128_si256(hi, 1));
  }
}

// One head's queries folded into latent space from the stored W_UK_hᵀ: k_b points at head h's
// rank Q8_0 rows of nope values (w_k_b[h][c][e] = W_UK_h[e, c]); for each query r < n,
// q_abs[r][c] = Σ_e q[r][e] · W_UK_h[e, c] (q_abs[r]: rank floats, overwritten).
struct AbsorbQ8 {
  const quant::BlockQ8_0* k_b;
  int64_t nope, rank;
  const float* const* q;
  float* const* q_abs;
  int64_t n;
};

// Columns [c0, c0 + 8 T) of AbsorbQueriesQ8: per block of 32 e, the T tiles of 8 columns are
// dequantized (transposed: w[k][e * 8 + i] = W_UK_h[32 b + e, c0 + 8 k + i]) once for all the
// queries, then each query's T independent fma chains advance by those 32 e.
template <int T>
PG_TARGET_AVX2 inline void AbsorbColumnsQ8(const AbsorbQ8& a, int64_t c0) {
  const int64_t nb = a.nope / quant::kQK;  // blocks per k_b row
  alignas(32) int8_t t[32 * 8];
  alignas(32) float w[T][32 * 8];
  for (int64_t b = 0; b < nb; ++b) {
    for (int k = 0; k < T; ++k) {
      const int8_t* rows[8];
      alignas(16) uint16_t d[8];
      for (int i = 0; i < 8; ++i) {
        const quant::BlockQ8_0& blk = a.k_b[(c0 + 8 * k + i) * nb + b];
        rows[i] = blk.qs;
        d[i] = blk.d;
      }
      TransposeTile8x32(rows, t);
      const __m256 vd = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d)));
      for (int e = 0; e < 32; ++e) {
        const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(t + 8 * e));
        _mm256_store_ps(w[k] + 8 * e,
                        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), vd));
      }
    }
    for (int64_t r = 0; r < a.n; ++r) {  // ScaleAxpy's fma(q[e], w, 1 * acc), e ascending
      const float* q = a.q[r] + b * quant::kQK;
      float* out = a.q_abs[r] + c0;
      __m256 acc[T];
      for (int k = 0; k < T; ++k) acc[k] = _mm256_loadu_ps(out + 8 * k);
      for (int e = 0; e < 32; ++e) {
        const __m256 qe = _mm256_set1_ps(q[e]);
        for (int k = 0; k < T; ++k) acc[k] = _mm256_fmadd_ps(qe, _mm256_load_ps(w[k] + 8 * e), acc[k]);
      }
      for (int k = 0; k < T; ++k) _mm256_storeu_ps(out + 8 * k, acc[k]);
    }
  }
}

PG_TARGET_AVX2 inline void AbsorbQueriesQ8(const AbsorbQ8& a) {
  for (int64_t r = 0; r < a.n; ++r) std::memset(a.q_abs[r], 0, size_t(a.rank) * sizeof(float));
  int64_t c0 = 0;
  for (; c0 + 64 <= a.rank; c0 += 64) AbsorbColumnsQ8<8>(a, c0);
  for (; c0 < a.rank; c0 += 32) AbsorbColumnsQ8<4>(a, c0);  // rank % 32 == 0
}

// Values i (8 of them, from `off`) of the Q8_0 block `blk` as f32.
PG_TARGET_AVX2 inline __m256 LoadQ8(const quant::BlockQ8_0& blk, __m256 d, int off) {
  const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk.qs + off));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), d);
}

// out[i] = Σ_k a[k] · b[i][k] for N Q8_0 rows b[i] of n values (n % 32 == 0), in DotRows'
// order: accumulator 0 over values 16 s .. 16 s + 7, accumulator 1 over the next 8, then the
// horizontal sum of their sum.
template <int N>
PG_TARGET_AVX2 inline void DotRowsQ8(const float* a, const quant::BlockQ8_0* const* b, int64_t n,
                                     float* out) {
  __m256 acc0[N], acc1[N];
  for (int i = 0; i < N; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
  for (int64_t k = 0; k < n; k += quant::kQK) {
    const __m256 a0 = _mm256_loadu_ps(a + k), a1 = _mm256_loadu_ps(a + k + 8);
    const __m256 a2 = _mm256_loadu_ps(a + k + 16), a3 = _mm256_loadu_ps(a + k + 24);
    for (int i = 0; i < N; ++i) {
      const quant::BlockQ8_0& blk = b[i][k / quant::kQK];
      const __m256 d = _mm256_set1_ps(_cvtsh_ss(blk.d));
      acc0[i] = _mm256_fmadd_ps(a0, LoadQ8(blk, d, 0), acc0[i]);
      acc1[i] = _mm256_fmadd_ps(a1, LoadQ8(blk, d, 8), acc1[i]);
      acc0[i] = _mm256_fmadd_ps(a2, LoadQ8(blk, d, 16), acc0[i]);
      acc1[i] = _mm256_fmadd_ps(a3, LoadQ8(blk, d, 24), acc1[i]);
    }
  }
  for (int i = 0; i < N; ++i) out[i] = simd::HSum(_mm256_add_ps(acc0[i], acc1[i]));
}

// out[j] = Σ_k a[k] · row(j)[k] for j in [0, count), Q8_0 rows four at a time (as DotMany).
template <class Row>
PG_TARGET_AVX2 inline void DotManyQ8(const float* a, const Row& row, int64_t count, int64_t n,
                                     float* out) {
  int64_t j = 0;
  const int64_t row_bytes = n / quant::kQK * int64_t(sizeof(quant::BlockQ8_0));
  for (; j + 4 <= count; j += 4) {
    for (int64_t i = j + 4; i < std::min(count, j + 8); ++i)  // the next group's rows
      for (int64_t o = 0; o < row_bytes; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(row(i)) + o, _MM_HINT_T0);
    const quant::BlockQ8_0* b[4] = {row(j), row(j + 1), row(j + 2), row(j + 3)};
    DotRowsQ8<4>(a, b, n, out + j);
  }
  for (; j < count; ++j) {
    const quant::BlockQ8_0* b[1] = {row(j)};
    DotRowsQ8<1>(a, b, n, out + j);
  }
}

}  // namespace pg::ops::cpu
