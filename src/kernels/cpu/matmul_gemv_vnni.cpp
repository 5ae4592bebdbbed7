// Decode GEMV for Q4_0 / Q4_1 / Q8_0 weights with AVX-512 VNNI, over groups of 4 weight rows
// (gemv_jobs.h; each pass prefetches the next group):
//  * Q8_0 (DotRowsQ8): per pair of blocks and row, the 64 weight bytes (q + 128) in one zmm, one
//    vpdpbusd against the int8 activation pair (ActPairs), int32 lanes converted and scaled by
//    dw * da of their block (one fma); the offset (-128 * d) folds through the activation sums
//    Σ_i off * a_i = off * da * Σ q_i = off * s (ActPairs::ds), one 4-lane multiply-add a pair.
//  * Q4_0 / Q4_1 and their RepackRows4 layouts (DotGroup16): int16 activations, two vpdpwssd a
//    row, the 4 rows folded into one vector before the convert and fma (below).
#include <immintrin.h>

#include <cstring>
#include <span>

#include "core/quant.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemv_jobs.h"
#include "kernels/cpu/q4_groups.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/q8_act.h"
#include "kernels/kernel_util.h"
#include "kernels/registry.h"

namespace pg::ops::cpu {
namespace {

// Q8_0 blocks: f16 d, then 32 int8 quants. vpdpbusd reads q + 128 (unsigned), hence the
// offset -128 * d folded through the activation sums.
constexpr int64_t kQ8Bytes = sizeof(quant::BlockQ8_0), kQ8QsOff = 2;
constexpr float kQ8Offset = -128.0f;

inline uint32_t Load16Twice(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return uint32_t(v) * 0x10001u;
}

// f16 scales of blocks b0, b1 -> [d0, d0, d1, d1] (the second of each pair scales the offset).
PG_TARGET_VNNI inline __m128 PairScalesQ8(const uint8_t* b0, const uint8_t* b1) {
  return _mm_cvtph_ps(_mm_insert_epi32(_mm_cvtsi32_si128(int(Load16Twice(b0))), int(Load16Twice(b1)), 1));
}

// The 64 unsigned weight bytes of blocks b0, b1 (q + 128), in element order.
PG_TARGET_VNNI inline __m512i PairBytesQ8(const uint8_t* b0, const uint8_t* b1) {
  const __m512i z = _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + kQ8QsOff))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + kQ8QsOff)), 1);
  return _mm512_xor_si512(z, _mm512_set1_epi8(char(0x80)));
}

// The 32 unsigned weight bytes of one block (an odd last block).
PG_TARGET_VNNI inline __m256i BlockBytesQ8(const uint8_t* b) {
  return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + kQ8QsOff)),
                          _mm256_set1_epi8(char(0x80)));
}

PG_TARGET_VNNI inline int32_t HSumI32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

// out[r] = Σ_k dequant(w_r)[k] * act[k] for the group's 4 Q8_0 rows (each row's lanes alone:
// a padded group gives its real rows the same bits).
PG_TARGET_VNNI void DotRowsQ8(const RowGroup& rg, const ActPairs& act, int64_t nb, float* out) {
  constexpr int R = kGemvGroupRows;
  // Lane -> which of the pair's scales applies: b0's 32 bytes, then b1's.
  const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
  __m512 acc[R];
  __m128 macc[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm512_setzero_ps();
    macc[r] = _mm_setzero_ps();
  }
  const int64_t npairs = nb / 2;
  for (int64_t pi = 0; pi < npairs; ++pi) {
    const int64_t b = 2 * pi;
    const __m512i a = _mm512_loadu_si512(act.qs + b * 32);
    const __m128 ad = _mm_loadu_ps(act.ds + 2 * b);  // [da0, s0, da1, s1]
    for (int r = 0; r < R; ++r) {
      const uint8_t* b0 = rg.rows[r] + b * kQ8Bytes;
      const uint8_t* b1 = b0 + kQ8Bytes;
      PrefetchLine(rg.ahead[r] + b * kQ8Bytes);
      const __m128 prod = _mm_mul_ps(PairScalesQ8(b0, b1), ad);  // [d0da0, d0s0, d1da1, d1s1]
      macc[r] = _mm_add_ps(macc[r], prod);
      const __m512 sc = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(prod));
      const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), PairBytesQ8(b0, b1), a);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), sc, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m128 m = macc[r];
    float v = _mm512_reduce_add_ps(acc[r]) +
              kQ8Offset * (_mm_cvtss_f32(_mm_shuffle_ps(m, m, 1)) +
                           _mm_cvtss_f32(_mm_shuffle_ps(m, m, 3)));
    if (nb % 2) {
      const int64_t b = nb - 1;
      const uint8_t* blk = rg.rows[r] + b * kQ8Bytes;
      const __m128 ws = PairScalesQ8(blk, blk);
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act.qs + b * 32));
      const int32_t dot = HSumI32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), BlockBytesQ8(blk), a));
      const float dw = _mm_cvtss_f32(ws), mw = _mm_cvtss_f32(_mm_shuffle_ps(ws, ws, 1));
      v += dw * act.ds[2 * b] * float(dot) + kQ8Offset * (mw * act.ds[2 * b + 1]);
    }
    out[r] = v;
  }
}

// Q4_0 / Q4_1 (source layout or RepackRows4's) with int16 activations (ActPairs16), one group
// of 4 weight rows (q4_groups.h reads them) against A activation rows. Per pair of blocks and
// row: the 32 quant bytes widen to 16 bits, lo = [b0 0-15 | b1 0-15], hi = [b0 16-31 | b1
// 16-31], and two chained vpdpwssd leave b0's partial sums in lanes 0-7, b1's in 8-15 (exact:
// |q| <= 127 * 128 times 15, 32 terms). Two unpack-and-add levels fold the 4 rows' vectors into
// one, z = [r0..r3 | r0..r3 | r0..r3 | r0..r3] (128-bit lanes: b0, b0, b1, b1; each lane a
// quarter of a row's block dot product, exact), so one convert and one fma per pair serve
// all 4 rows: acc += z * (dw * da). Offsets fold through the activation sums (ActPairs16::ds:
// Q4_0 -8 * dw * s, Q4_1 + m * s) into an 8-lane accumulator. Row r = lanes r, r+4, r+8, r+12
// of acc plus lanes r, r+4 of the offsets'.
// Bits: every lane's operations depend only on its own weight row and the activation row, so
// a padded short group, the packed layout and any A give each row the same bits.
template <bool kQ4_1, bool kRows4, int A>
PG_TARGET_VNNI void DotGroup16(const RowGroup& rg, const ActPairs16* acts, int64_t nb, float* out) {
  using T = q4::Q4<kQ4_1>;
  const __m512i lo_mask = _mm512_set1_epi16(0x0F);
  __m512 acc[A];
  __m256 macc[A];
  for (int a = 0; a < A; ++a) {
    acc[a] = _mm512_setzero_ps();
    macc[a] = _mm256_setzero_ps();
  }
  const int64_t npairs = (nb + 1) / 2;
  for (int64_t pi = 0; pi < npairs; ++pi) {
    const int64_t b = 2 * pi;
    const bool full = b + 1 < nb;
    const uint8_t* pair;
    const uint8_t* const* src = q4::PairSource<kQ4_1, kRows4>(rg, pi, &pair);
    __m256 dw, mw;
    q4::Scales<kQ4_1>(q4::ScaleFields<kQ4_1, kRows4>(src, b, full), full, &dw, &mw);
    __m512i w_lo[4], w_hi[4];
    for (int r = 0; r < 4; ++r) {
      const __m512i w16 = _mm512_cvtepu8_epi16(q4::Quants<kQ4_1, kRows4>(src, b, r, full));
      w_lo[r] = _mm512_and_si512(w16, lo_mask);
      w_hi[r] = _mm512_srli_epi16(w16, 4);
    }
    for (int a = 0; a < A; ++a) {
      const __m512i a_lo = _mm512_loadu_si512(acts[a].qs + pi * 64);
      const __m512i a_hi = _mm512_loadu_si512(acts[a].qs + pi * 64 + 32);
      __m512i d[4];
      for (int r = 0; r < 4; ++r)
        d[r] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(_mm512_setzero_si512(), w_lo[r], a_lo), w_hi[r], a_hi);
      const __m512i x01 = _mm512_add_epi32(_mm512_unpacklo_epi32(d[0], d[1]), _mm512_unpackhi_epi32(d[0], d[1]));
      const __m512i x23 = _mm512_add_epi32(_mm512_unpacklo_epi32(d[2], d[3]), _mm512_unpackhi_epi32(d[2], d[3]));
      const __m512i z = _mm512_add_epi32(_mm512_unpacklo_epi64(x01, x23), _mm512_unpackhi_epi64(x01, x23));
      const __m256 ds = _mm256_castps128_ps256(_mm_loadu_ps(acts[a].ds + 4 * pi));  // [da0, s0, da1, s1]
      const __m256 da = _mm256_permutevar8x32_ps(ds, _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2));
      const __m256 sa = _mm256_permutevar8x32_ps(ds, _mm256_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3));
      const __m512 sc8 = _mm512_castps256_ps512(_mm256_mul_ps(dw, da));
      const __m512 sc = _mm512_shuffle_f32x4(sc8, sc8, _MM_SHUFFLE(1, 1, 0, 0));  // [b0 b0 b1 b1]
      acc[a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(z), sc, acc[a]);
      macc[a] = _mm256_fmadd_ps(mw, sa, macc[a]);
    }
  }
  for (int a = 0; a < A; ++a) {
    alignas(64) float v[16];
    alignas(32) float m[8];
    _mm512_store_ps(v, acc[a]);
    _mm256_store_ps(m, macc[a]);
    for (int r = 0; r < 4; ++r)
      out[a * 4 + r] = ((v[r] + v[r + 4]) + (v[r + 8] + v[r + 12])) + T::kOffset * (m[r] + m[r + 4]);
  }
}

constexpr int kActsPerPass = 4;  // activation rows sharing each Q4 weight unpack (prefill)

// Per activation row: ActPairs16 (Q4) rounds nb up to whole pairs (an odd last block has a zero
// partner): qs (nb + 1) / 2 * 64 int16, ds (nb + 1) / 2 * 4 floats; ActPairs (Q8_0): nb * 32
// int8, nb * 2 floats.
int64_t Q4RowQs(int64_t nb) { return (nb + 1) / 2 * 64; }
int64_t Q4RowDs(int64_t nb) { return (nb + 1) / 2 * 4; }

template <bool kQ4_1, bool kRows4>
void RunGroupQ4(const GemvJob& job, int64_t g) {
  const RowGroup rg = MakeRowGroup(job, g);
  RunActPasses<kActsPerPass>(job, rg, [&](int64_t r0, auto count, float* v) {
    constexpr int kA = decltype(count)::value;
    ActPairs16 acts[kA];
    for (int a = 0; a < kA; ++a)
      acts[a] = ActPairs16{static_cast<int16_t*>(job.qs) + (r0 + a) * Q4RowQs(job.nb),
                           job.ds + (r0 + a) * Q4RowDs(job.nb)};
    DotGroup16<kQ4_1, kRows4, kA>(rg, acts, job.nb, v);
  });
}

void RunGroupQ8(const GemvJob& job, int64_t g) {
  const RowGroup rg = MakeRowGroup(job, g);
  RunActPasses<1>(job, rg, [&](int64_t r, auto, float* v) {
    DotRowsQ8(rg, ActPairs{static_cast<int8_t*>(job.qs) + r * job.nb * 32, job.ds + r * job.nb * 2},
              job.nb, v);
  });
}

// Arena bytes of one job's activations (64-byte aligned segments).
int64_t ActBytes(const MatmulParams& p) {
  const int64_t n = p.x.dim(0), nb = p.x.dim(1) / 32;
  if (p.w.dtype == DType::kQ8_0) return CacheLines(n * nb * 32) + CacheLines(n * nb * 2 * 4);
  return CacheLines(n * Q4RowQs(nb) * 2) + CacheLines(n * Q4RowDs(nb) * 4);
}

// Quantizes p's activation rows at `arena` (ActBytes(p) bytes) and describes the job.
GemvJob Prepare(const MatmulParams& p, uint8_t* arena) {
  const DType t = p.w.dtype;
  if (t == DType::kQ8_0) {
    GemvJob j = JobShape(p, kQ8Bytes);
    j.run = &RunGroupQ8;
    j.qs = arena;
    j.ds = reinterpret_cast<float*>(arena + CacheLines(j.n * j.nb * 32));
    for (int64_t r = 0; r < j.n; ++r)
      QuantizeActPairs(detail::RowF32(p.x, r), p.x.dim(1),
                       ActPairs{static_cast<int8_t*>(j.qs) + r * j.nb * 32, j.ds + r * j.nb * 2});
    return j;
  }
  const bool q4_1 = t == DType::kQ4_1 || t == DType::kQ4_1x4;
  GemvJob j = JobShape(p, q4_1 ? q4::Q4<true>::kBytes : q4::Q4<false>::kBytes);
  switch (t) {
    case DType::kQ4_0: j.run = &RunGroupQ4<false, false>; break;
    case DType::kQ4_1: j.run = &RunGroupQ4<true, false>; break;
    case DType::kQ4_0x4: j.run = &RunGroupQ4<false, true>; break;
    case DType::kQ4_1x4: j.run = &RunGroupQ4<true, true>; break;
    default: PG_CHECK(false, "GemvQuantVnni512: dtype {}", Name(t));
  }
  j.qs = arena;
  j.ds = reinterpret_cast<float*>(arena + CacheLines(j.n * Q4RowQs(j.nb) * 2));
  for (int64_t r = 0; r < j.n; ++r)
    QuantizeActPairs16(detail::RowF32(p.x, r), p.x.dim(1),
                       ActPairs16{static_cast<int16_t*>(j.qs) + r * Q4RowQs(j.nb), j.ds + r * Q4RowDs(j.nb)});
  return j;
}

}  // namespace

void GemvQuantVnni512Many(std::span<const MatmulParams> ps) {
  RunGemvJobs(ps, GemvFamily{&ActBytes, &Prepare});
}

PG_TARGET_VNNI void QuantizeActPairs(const float* x, int64_t k, const ActPairs& out) {
  for (int64_t b = 0; b < k / 32; ++b, x += 32) {
    float d;
    const int32_t sum = simd::QuantizeBlock32(x, out.qs + b * 32, &d);
    out.ds[2 * b] = d;
    out.ds[2 * b + 1] = d * float(sum);
  }
}

PG_TARGET_VNNI void QuantizeActPairs16(const float* x, int64_t k, const ActPairs16& out) {
  const int64_t nb = k / 32;
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(
        _mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / float(kAct16Max), id = d > 0 ? 1.0f / d : 0.0f;
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid));  // round to nearest even
    const __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
    const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
    // pair layout [b0 0-15 | b1 0-15 | b0 16-31 | b1 16-31]
    int16_t* dst0 = out.qs + (b / 2) * 64 + (b % 2) * 16;  // elements 0-15
    int16_t* dst1 = dst0 + 32;                              // elements 16-31
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst0), _mm512_cvtsepi32_epi16(i0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst1), _mm512_cvtsepi32_epi16(i1));
    out.ds[2 * b] = d;
    out.ds[2 * b + 1] = d * float(sum);
  }
  if (nb % 2) {  // the zero partner of an odd last block
    int16_t* dst0 = out.qs + (nb / 2) * 64 + 16;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst0), _mm256_setzero_si256());
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst0 + 32), _mm256_setzero_si256());
    out.ds[2 * nb] = 0.0f;
    out.ds[2 * nb + 1] = 0.0f;
  }
}

void GemvQuantVnni512(const MatmulParams& p) { GemvQuantVnni512Many({&p, 1}); }

bool GemvQuantVnni512Reads(DType t) {
  return t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ8_0 || IsRows4(t);
}

bool GemvQuantVnni512Takes(const MatmulParams& p) {
  return Features().vnni && MaxKernelPriority() >= kPriorityCpuAvx512 &&
         GemvQuantVnni512Reads(p.w.dtype) && p.x.dim(0) <= kGemvMaxActRows && !p.w_scale.data;
}

}  // namespace pg::ops::cpu
