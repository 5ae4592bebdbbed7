// Inline AVX2 helpers for the CPU kernels. Every function carries the AVX2 target attribute,
// so it may only be called from code that runs after a Features().avx2 check.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/cpu_features.h"

namespace pg::ops::cpu::simd {

PG_TARGET_AVX2 inline float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

PG_TARGET_AVX2 inline float HMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// e^x: 2^(x log2 e) = 2^n * 2^f, f in [-0.5, 0.5], degree-7 Taylor for 2^f (relative error
// < 2e-7). Inputs clamped to [-87, 88] so no inf or denormal is produced (e^-87 ~ 1.6e-38;
// callers that need exact zeros for -inf must mask).
PG_TARGET_AVX2 inline __m256 Exp(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  __m256 t = _mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f));
  __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 f = _mm256_sub_ps(t, n);
  __m256 p = _mm256_set1_ps(1.52527338040598e-5f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.54035303933816e-4f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.00133335581464284f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.00961812910762848f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.0555041086648216f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.240226506959101f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.693147180559945f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// Σ a[i] * b[i], n >= 0.
PG_TARGET_AVX2 inline float Dot(const float* a, const float* b, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), a1);
  }
  if (i + 8 <= n) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
    i += 8;
  }
  float s = HSum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y = y * scale + alpha * x  (n elements).
PG_TARGET_AVX2 inline void ScaleAxpy(float* y, float scale, float alpha, const float* x, int64_t n) {
  const __m256 vs = _mm256_set1_ps(scale), va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i),
                                            _mm256_mul_ps(vs, _mm256_loadu_ps(y + i))));
  for (; i < n; ++i) y[i] = y[i] * scale + alpha * x[i];
}

// 32 floats -> int8 q[i] = round(x[i] / d) (ties to even), d = max |x| / 127 (*d_out; 0 for
// an all-zero block, whose q are 0). Returns Σ q.
PG_TARGET_AVX2 inline int32_t QuantizeBlock32(const float* x, int8_t* q, float* d_out) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
  __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
  __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign_mask, v0), _mm256_andnot_ps(sign_mask, v1)),
                           _mm256_max_ps(_mm256_andnot_ps(sign_mask, v2), _mm256_andnot_ps(sign_mask, v3)));
  const float amax = HMax(m);
  const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
  const __m256 vid = _mm256_set1_ps(id);
  __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, vid));  // round to nearest even
  __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, vid));
  __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, vid));
  __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, vid));
  __m256i s = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  s4 = _mm_hadd_epi32(s4, s4);
  s4 = _mm_hadd_epi32(s4, s4);
  // Pack 32 x i32 -> 32 x i8 in order (packs interleave 128-bit lanes; fix with permute).
  __m256i p01 = _mm256_packs_epi32(i0, i1), p23 = _mm256_packs_epi32(i2, i3);
  __m256i p = _mm256_packs_epi16(p01, p23);
  p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), p);
  *d_out = d;
  return _mm_cvtsi128_si32(s4);
}

}  // namespace pg::ops::cpu::simd
