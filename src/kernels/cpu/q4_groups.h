// The weight side of the 4-row-group Q4 GEMV kernels (matmul_gemv_q4_avx2.cpp, AVX2;
// matmul_gemv_vnni.cpp, AVX-512 VNNI): a group's scale fields and quant bytes for one pair of
// blocks (b, b + 1), read either from 4 row pointers of the source layout or from
// RepackRows4's interleaved copy (rows[0] = the pair's bytes there), into the same registers
// in the same lane order, so both layouts give the same bits. Lane order of a pair's scales:
// [r0..r3 of b0 | r0..r3 of b1]; an odd last block (!full) fills the b0 lanes and zeros the
// b1 lanes (its quants: 16 bytes, then zeros).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/quant.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemv_jobs.h"

namespace pg::ops::cpu::q4 {

template <bool kQ4_1>
struct Q4 {
  static constexpr int64_t kBytes = kQ4_1 ? sizeof(quant::BlockQ4_1) : sizeof(quant::BlockQ4_0);
  static constexpr int64_t kQsOff = kQ4_1 ? 4 : 2;      // bytes of the scale field(s)
  static constexpr float kOffset = kQ4_1 ? 1.0f : -8.0f;  // applied to the folded term
};

inline uint64_t LoadU(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  std::memcpy(&v, p, size_t(bytes));
  return v;
}

// The scale fields of one pair (full) or of one last block (!full) of 4 rows, as RepackRows4
// stores them: pair [r0 b0, r0 b1, r1 b0, ...], last block [r0, r1, r2, r3]; each field is d
// (Q4_0) or d, m (Q4_1), f16.
template <bool kQ4_1, bool kRows4>
PG_TARGET_AVX2 inline __m256i ScaleFields(const uint8_t* const* rows, int64_t b, bool full) {
  using T = Q4<kQ4_1>;
  if constexpr (kRows4) {
    return full ? (kQ4_1 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[0]))
                         : _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[0]))))
                : _mm256_castsi128_si256(kQ4_1 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[0]))
                                               : _mm_loadl_epi64(reinterpret_cast<const __m128i*>(rows[0])));
  } else {
    constexpr int f = int(T::kQsOff);  // field bytes
    uint64_t v[4];
    for (int r = 0; r < 4; ++r) {
      const uint8_t* b0 = rows[r] + b * T::kBytes;
      v[r] = full ? LoadU(b0, f) | (LoadU(b0 + T::kBytes, f) << (8 * f)) : LoadU(b0, f);
    }
    if (full)  // 2 fields a row: 4 (Q4_0) or 8 (Q4_1) bytes
      return kQ4_1 ? _mm256_setr_epi64x(int64_t(v[0]), int64_t(v[1]), int64_t(v[2]), int64_t(v[3]))
                   : _mm256_castsi128_si256(_mm_setr_epi32(int(v[0]), int(v[1]), int(v[2]), int(v[3])));
    return kQ4_1 ? _mm256_castsi128_si256(_mm_setr_epi32(int(v[0]), int(v[1]), int(v[2]), int(v[3])))
                 : _mm256_castsi128_si256(_mm_setr_epi16(short(v[0]), short(v[1]), short(v[2]),
                                                         short(v[3]), 0, 0, 0, 0));
  }
}

// ScaleFields -> dw (and Q4_1's m) in the h lane order [r0..r3 of b0 | r0..r3 of b1]; a last
// block's b1 lanes are 0.
template <bool kQ4_1>
PG_TARGET_AVX2 inline void Scales(__m256i f, bool full, __m256* dw, __m256* mw) {
  const __m256 zero = _mm256_setzero_ps();
  if constexpr (kQ4_1) {
    const __m256 x = _mm256_cvtph_ps(_mm256_castsi256_si128(f));
    if (full) {  // x = [r0b0 d m, r0b1 d m, r1b0 d m, r1b1 d m], y = the same of r2, r3
      const __m256 y = _mm256_cvtph_ps(_mm256_extracti128_si256(f, 1));
      const __m256i idx = _mm256_setr_epi32(0, 4, 2, 6, 1, 5, 3, 7);
      *dw = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(x, y, _MM_SHUFFLE(2, 0, 2, 0)), idx);
      *mw = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(x, y, _MM_SHUFFLE(3, 1, 3, 1)), idx);
    } else {  // x = [r0 d m, r1 d m, r2 d m, r3 d m]
      *dw = _mm256_blend_ps(_mm256_permutevar8x32_ps(x, _mm256_setr_epi32(0, 2, 4, 6, 0, 0, 0, 0)), zero, 0xF0);
      *mw = _mm256_blend_ps(_mm256_permutevar8x32_ps(x, _mm256_setr_epi32(1, 3, 5, 7, 0, 0, 0, 0)), zero, 0xF0);
    }
  } else {
    const __m256 x = _mm256_cvtph_ps(_mm256_castsi256_si128(f));  // last block: upper 4 are 0
    *dw = full ? _mm256_permutevar8x32_ps(x, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7)) : x;
    *mw = *dw;
  }
}

// Row r's 32 quant bytes of the pair at block b ([b0's 16 | b1's 16]; a last block's 16 then
// zeros). Rows4: rows[0] is the pair's (or last block's) start.
template <bool kQ4_1, bool kRows4>
PG_TARGET_AVX2 inline __m256i Quants(const uint8_t* const* rows, int64_t b, int r, bool full) {
  using T = Q4<kQ4_1>;
  auto load16 = [](const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); };
  if constexpr (kRows4) {
    return full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[0] + 8 * T::kQsOff + 32 * r))
                : _mm256_zextsi128_si256(load16(rows[0] + 4 * T::kQsOff + 16 * r));
  } else {
    const uint8_t* b0 = rows[r] + b * T::kBytes + T::kQsOff;
    return full ? _mm256_set_m128i(load16(b0 + T::kBytes), load16(b0))
                : _mm256_zextsi128_si256(load16(b0));
  }
}

// Where pair pi's weights are read by ScaleFields / Quants: the group's rows, or (Rows4) the
// pair's interleaved bytes, stored in *pair; prefetches the next group's same bytes first.
template <bool kQ4_1, bool kRows4>
PG_TARGET_AVX2 inline const uint8_t* const* PairSource(const RowGroup& rg, int64_t pi,
                                                      const uint8_t** pair) {
  using T = Q4<kQ4_1>;
  if constexpr (kRows4) {
    constexpr int64_t kPair4 = 8 * T::kBytes;  // one pair of blocks of 4 rows: <= 160 bytes
    *pair = rg.rows[0] + pi * kPair4;
    const uint8_t* next = rg.ahead[0] + pi * kPair4;
    PrefetchLine(next);
    PrefetchLine(next + 64);
    PrefetchLine(next + 128);
    return pair;
  } else {
    for (int r = 0; r < 4; ++r) PrefetchLine(rg.ahead[r] + 2 * pi * T::kBytes);
    return rg.rows;
  }
}

}  // namespace pg::ops::cpu::q4
