// Decode GEMV for Q4_0 / Q4_1 / Q8_0 weights with AVX-512 VNNI (512-bit vpdpbusd).
//
// Per pair of weight blocks (64 weights) and per output row:
//   * the weight bytes of both blocks go into one zmm as unsigned 8-bit values
//     (Q4: nibbles -> [b0 lo16 | b1 lo16 | b0 hi16 | b1 hi16]; Q8_0: qs xor 0x80, i.e. q+128);
//   * one vpdpbusd against the activation pair (ActPairs, laid out to match), int32 lanes
//     converted to f32 and scaled per lane by dw*da of their block (one fma);
//   * the block offsets (Q4_1 m; Q4_0's -8 and Q8_0's -128 times d) are folded through the
//     activation block sums: Σ_i off*a_i = off * da * Σ q_i = off * s, s = da*Σq (ActPairs::ds),
//     so they cost one 4-lane multiply-add per pair, not per weight.
// Four output rows are processed per pass so each activation load serves four rows and the
// four accumulator chains overlap. Rows are spread over the thread pool in groups of four, and
// each pass prefetches the next group. Q4 weights packed by RepackRows4 (4 rows interleaved per
// pair of blocks) make a group one sequential stream with its 8 scales in one load.
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

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

// kQ4_0x4 / kQ4_1x4: the same blocks in RepackRows4's interleaved layout (below).
enum class WKind { kQ4_0, kQ4_1, kQ8_0, kQ4_0x4, kQ4_1x4 };

template <WKind K>
struct Traits;
template <>
struct Traits<WKind::kQ4_1> {
  static constexpr int64_t kBytes = sizeof(quant::BlockQ4_1), kQsOff = 4;
  static constexpr float kOffset = 1.0f;  // lanes 1/3 of the scale vector already hold m
  static constexpr bool kNibbles = true;
};
template <>
struct Traits<WKind::kQ4_0> {
  static constexpr int64_t kBytes = sizeof(quant::BlockQ4_0), kQsOff = 2;
  static constexpr float kOffset = -8.0f;  // x = (q - 8) d
  static constexpr bool kNibbles = true;
};
template <>
struct Traits<WKind::kQ8_0> {
  static constexpr int64_t kBytes = sizeof(quant::BlockQ8_0), kQsOff = 2;
  static constexpr float kOffset = -128.0f;  // dpbusd reads q + 128 (unsigned)
  static constexpr bool kNibbles = false;
};
template <WKind Base>
struct Rows4Traits : Traits<Base> {
  static constexpr WKind kBase = Base;
};
template <>
struct Traits<WKind::kQ4_0x4> : Rows4Traits<WKind::kQ4_0> {};
template <>
struct Traits<WKind::kQ4_1x4> : Rows4Traits<WKind::kQ4_1> {};

template <WKind K>
constexpr bool IsRows4() {
  return K == WKind::kQ4_0x4 || K == WKind::kQ4_1x4;
}
// The source type of K's blocks (PairScales reads the scale fields by it).
template <WKind K>
constexpr WKind BaseKind() {
  if constexpr (IsRows4<K>()) return Traits<K>::kBase;
  else return K;
}

inline uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint32_t Load16Twice(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return uint32_t(v) * 0x10001u;
}

// f16 scale fields of blocks b0, b1 -> [d0, m0, d1, m1] (Q4_1) or [d0, d0, d1, d1].
template <WKind K>
PG_TARGET_VNNI inline __m128 PairScales(const uint8_t* b0, const uint8_t* b1) {
  __m128i v;
  if constexpr (K == WKind::kQ4_1) v = _mm_insert_epi32(_mm_cvtsi32_si128(int(Load32(b0))), int(Load32(b1)), 1);
  else v = _mm_insert_epi32(_mm_cvtsi32_si128(int(Load16Twice(b0))), int(Load16Twice(b1)), 1);
  return _mm_cvtph_ps(v);
}

// The 64 unsigned weight bytes of blocks b0, b1 in ActPairs order.
template <WKind K>
PG_TARGET_VNNI inline __m512i PairBytes(const uint8_t* b0, const uint8_t* b1) {
  using T = Traits<K>;
  if constexpr (T::kNibbles) {
    __m256i v = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + T::kQsOff))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1 + T::kQsOff)), 1);
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
    return _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
  } else {
    __m512i z = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + T::kQsOff))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + T::kQsOff)), 1);
    return _mm512_xor_si512(z, _mm512_set1_epi8(char(0x80)));
  }
}

// The 32 unsigned weight bytes of one block in natural order (odd tail block).
template <WKind K>
PG_TARGET_VNNI inline __m256i BlockBytes(const uint8_t* b) {
  using T = Traits<K>;
  if constexpr (T::kNibbles) {
    __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + T::kQsOff));
    __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
  } else {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + T::kQsOff)),
                            _mm256_set1_epi8(char(0x80)));
  }
}

PG_TARGET_VNNI inline int32_t HSumI32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

// Software prefetch of the rows a thread reads next (`ahead[r]`, e.g. the next row group's),
// at the offset being read now: one group ahead (4 rows x k/32 blocks, ~4.6 KB for Qwen3's
// experts) keeps enough lines in flight to stream from DRAM. Without it the 4-row pass ran
// at 14.7 GB/s of streamed weights where memcpy copies 21 (2 threads, Zen 5 VM; 32-38 with
// it); in cache it reached 36-40. Two or four groups ahead measured no better (bench_kernels,
// noisy). Redundant prefetches of lines already fetched cost an issue slot each.
PG_TARGET_VNNI inline void PrefetchAt(const uint8_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}

// out[r] = Σ_k dequant(w_r)[k] * act[k] for R weight rows (block pointers rows[r]); ahead[r]
// (R pointers, may equal rows) are prefetched alongside.
template <WKind K, int R>
PG_TARGET_VNNI void DotRows(const uint8_t* const* rows, const uint8_t* const* ahead,
                            const ActPairs& act, int64_t nb, float* out) {
  using T = Traits<K>;
  // Lane -> which of the pair's scales applies. Q4 order: [b0 lo | b1 lo | b0 hi | b1 hi].
  const __m512i idx = T::kNibbles
                          ? _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 0, 0, 0, 0, 2, 2, 2, 2)
                          : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
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
      const uint8_t* b0 = rows[r] + b * T::kBytes;
      const uint8_t* b1 = b0 + T::kBytes;
      PrefetchAt(ahead[r] + b * T::kBytes);
      const __m128 prod = _mm_mul_ps(PairScales<K>(b0, b1), ad);  // [d0da0, m0s0, d1da1, m1s1]
      macc[r] = _mm_add_ps(macc[r], prod);
      const __m512 sc = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(prod));
      const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), PairBytes<K>(b0, b1), a);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), sc, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m128 m = macc[r];
    float v = _mm512_reduce_add_ps(acc[r]) +
              T::kOffset * (_mm_cvtss_f32(_mm_shuffle_ps(m, m, 1)) +
                            _mm_cvtss_f32(_mm_shuffle_ps(m, m, 3)));
    if (nb % 2) {
      const int64_t b = nb - 1;
      const uint8_t* blk = rows[r] + b * T::kBytes;
      const __m128 ws = PairScales<K>(blk, blk);
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act.qs + b * 32));
      const int32_t dot = HSumI32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), BlockBytes<K>(blk), a));
      const float dw = _mm_cvtss_f32(ws), mw = _mm_cvtss_f32(_mm_shuffle_ps(ws, ws, 1));
      v += dw * act.ds[2 * b] * float(dot) + T::kOffset * (mw * act.ds[2 * b + 1]);
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
PG_TARGET_VNNI void DotGroup16(const uint8_t* const* rows, const uint8_t* const* ahead,
                               const ActPairs16* acts, int64_t nb, float* out) {
  using T = q4::Q4<kQ4_1>;
  constexpr int64_t kPair4 = 8 * T::kBytes;  // Rows4: one pair of blocks of 4 rows
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
    const uint8_t* group[4];  // Rows4: group[0] = this pair's bytes
    const uint8_t* const* src = rows;
    if constexpr (kRows4) {
      group[0] = rows[0] + pi * kPair4;
      const uint8_t* next = ahead[0] + pi * kPair4;
      PrefetchAt(next);
      PrefetchAt(next + 64);
      PrefetchAt(next + 128);
      src = group;
    } else {
      for (int r = 0; r < 4; ++r) PrefetchAt(ahead[r] + b * T::kBytes);
    }
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

// Weight rows per pass (a row group, gemv_jobs.h).
constexpr int64_t kRowsPerPass = kGemvGroupRows;
constexpr int64_t kActsPerPass = 4;  // activation rows per pass of the int16 kernel (prefill)
constexpr int64_t kMaxActRows = 16;  // the registry sends at most kGemvMaxRows rows

// Activation rows quantized once per call (int16 for Q4 types, int8 for Q8_0).
template <WKind K>
struct ActFor {
  static constexpr bool kWide = Traits<K>::kNibbles;
  using Elem = std::conditional_t<kWide, int16_t, int8_t>;
  using Row = std::conditional_t<kWide, ActPairs16, ActPairs>;
};
// Elements of qs and floats of ds an activation row takes: ActPairs16 rounds nb up to whole
// pairs (an odd last block has a zero partner), ActPairs does not.
template <WKind K>
int64_t ActRowQs(int64_t nb) { return ActFor<K>::kWide ? (nb + 1) / 2 * 64 : nb * 32; }
template <WKind K>
int64_t ActRowDs(int64_t nb) { return ActFor<K>::kWide ? (nb + 1) / 2 * 4 : nb * 2; }

template <WKind K>
void RunGroup(const GemvJob& job, int64_t g) {
  using A = ActFor<K>;
  const MatmulParams& p = *job.p;
  const int64_t nb = job.nb, j0 = g * kRowsPerPass,
                rows_here = std::min(kRowsPerPass, job.m - j0);
  const uint8_t* rows[kRowsPerPass];
  const uint8_t* ahead[kRowsPerPass];  // the next group's rows (this group's at the end)
  for (int64_t i = 0; i < kRowsPerPass; ++i) {  // Q4: a short last group repeats its last row
    const int64_t j = j0 + std::min(i, rows_here - 1);
    rows[i] = job.w0 + j * job.row_bytes;  // Rows4: [0] is the group, m % 4 == 0
    ahead[i] = j + kRowsPerPass < job.m ? rows[i] + kRowsPerPass * job.row_bytes : rows[i];
  }
  auto act = [&](int64_t r) {
    return typename A::Row{static_cast<typename A::Elem*>(job.qs) + r * ActRowQs<K>(nb),
                           job.ds + r * ActRowDs<K>(nb)};
  };
  auto store = [&](int64_t r, const float* v) { StoreGroup(p, r, j0, rows_here, v); };
  float v[kActsPerPass * kRowsPerPass];
  int64_t r = 0;
  if constexpr (A::kWide) {  // Q4 kinds: activation rows share each pass's weight unpacking
    constexpr bool kQ4_1 = BaseKind<K>() == WKind::kQ4_1;
    for (; r + kActsPerPass <= job.n; r += kActsPerPass) {
      typename A::Row several[kActsPerPass];
      for (int64_t a = 0; a < kActsPerPass; ++a) several[a] = act(r + a);
      DotGroup16<kQ4_1, IsRows4<K>(), kActsPerPass>(rows, ahead, several, nb, v);
      for (int64_t a = 0; a < kActsPerPass; ++a) store(r + a, v + a * kRowsPerPass);
    }
    for (; r < job.n; ++r) {
      const typename A::Row one = act(r);
      DotGroup16<kQ4_1, IsRows4<K>(), 1>(rows, ahead, &one, nb, v);
      store(r, v);
    }
  } else {  // Q8_0
    for (; r < job.n; ++r) {
      const typename A::Row a = act(r);
      if (rows_here == kRowsPerPass) DotRows<K, kRowsPerPass>(rows, ahead, a, nb, v);
      else for (int i = 0; i < rows_here; ++i) DotRows<K, 1>(rows + i, ahead + i, a, nb, v + i);
      store(r, v);
    }
  }
}

// Arena bytes of one job's activations (64-byte aligned segments).
template <WKind K>
int64_t ActBytesOf(int64_t n, int64_t nb) {
  using Elem = typename ActFor<K>::Elem;
  return CacheLines(n * ActRowQs<K>(nb) * int64_t(sizeof(Elem))) + CacheLines(n * ActRowDs<K>(nb) * 4);
}
int64_t ActBytes(const MatmulParams& p) {  // int16 rows for every Q4 kind, int8 for Q8_0
  const int64_t n = p.x.dim(0), nb = p.x.dim(1) / 32;
  return p.w.dtype == DType::kQ8_0 ? ActBytesOf<WKind::kQ8_0>(n, nb) : ActBytesOf<WKind::kQ4_0>(n, nb);
}

// Quantizes p's activation rows at `arena` (ActBytes(p) bytes) and describes the job.
template <WKind K>
GemvJob PrepareJob(const MatmulParams& p, uint8_t* arena) {
  using A = ActFor<K>;
  GemvJob j;
  j.p = &p;
  j.run = &RunGroup<K>;
  j.n = p.x.dim(0);
  j.nb = p.x.dim(1) / 32;
  j.m = p.w.dim(0);
  j.groups = (j.m + kRowsPerPass - 1) / kRowsPerPass;
  j.w0 = p.w.row_ptr(0);
  j.row_bytes = p.w.strides[0] / quant::kQK * Traits<K>::kBytes;
  PG_CHECK(j.n <= kMaxActRows, "GemvQuantVnni512: {} rows", j.n);
  auto* qs = reinterpret_cast<typename A::Elem*>(arena);
  auto* ds = reinterpret_cast<float*>(arena + CacheLines(j.n * ActRowQs<K>(j.nb) * int64_t(sizeof(*qs))));
  j.qs = qs;
  j.ds = ds;
  for (int64_t r = 0; r < j.n; ++r) {
    const typename A::Row a{qs + r * ActRowQs<K>(j.nb), ds + r * ActRowDs<K>(j.nb)};
    if constexpr (A::kWide) QuantizeActPairs16(detail::RowF32(p.x, r), p.x.dim(1), a);
    else QuantizeActPairs(detail::RowF32(p.x, r), p.x.dim(1), a);
  }
  return j;
}

GemvJob PrepareAny(const MatmulParams& p, uint8_t* arena) {
  switch (p.w.dtype) {
    case DType::kQ4_1: return PrepareJob<WKind::kQ4_1>(p, arena);
    case DType::kQ4_0: return PrepareJob<WKind::kQ4_0>(p, arena);
    case DType::kQ8_0: return PrepareJob<WKind::kQ8_0>(p, arena);
    case DType::kQ4_0x4: return PrepareJob<WKind::kQ4_0x4>(p, arena);
    case DType::kQ4_1x4: return PrepareJob<WKind::kQ4_1x4>(p, arena);
    default: PG_CHECK(false, "GemvQuantVnni512: dtype {}", Name(p.w.dtype));
  }
  return {};
}

}  // namespace

void GemvQuantVnni512Many(std::span<const MatmulParams> ps) {
  RunGemvJobs(ps, GemvFamily{&ActBytes, &PrepareAny});
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
         GemvQuantVnni512Reads(p.w.dtype) && p.x.dim(0) <= kMaxActRows && !p.w_scale.data;
}

bool CanRepackRows4(const TensorView& w) {
  return Features().avx2 && (w.dtype == DType::kQ4_0 || w.dtype == DType::kQ4_1) && w.ndim == 2 &&
         w.dim(0) % kRowsPerPass == 0 && w.dim(0) > 0 && w.is_contiguous() &&
         w.device == Device::kCpu;
}

// Per group of 4 rows, per pair of blocks (b, b + 1): the 8 blocks' scale fields (row-major:
// r0 b, r0 b+1, r1 b, ...; 2 bytes each for Q4_0, d and m 4 bytes for Q4_1), then each row's
// 32 quant bytes (block b's 16, block b+1's 16). An odd last block: 4 scale fields, then 4 x 16
// quant bytes. A group takes exactly its 4 rows' bytes.
Tensor RepackRows4(const TensorView& w) {
  PG_CHECK(CanRepackRows4(w), "RepackRows4: {} {}", Name(w.dtype), w.ShapeString());
  const bool q4_1 = w.dtype == DType::kQ4_1;
  const int64_t bytes = q4_1 ? Traits<WKind::kQ4_1>::kBytes : Traits<WKind::kQ4_0>::kBytes;
  const int64_t qs_off = q4_1 ? Traits<WKind::kQ4_1>::kQsOff : Traits<WKind::kQ4_0>::kQsOff;
  const int64_t m = w.dim(0), nb = w.dim(1) / quant::kQK, row_bytes = nb * bytes;
  Tensor out(q4_1 ? DType::kQ4_1x4 : DType::kQ4_0x4, {m, w.dim(1)});
  const uint8_t* src = static_cast<const uint8_t*>(w.data);
  uint8_t* dst = static_cast<uint8_t*>(out.view().data);
  for (int64_t g = 0; g < m / kRowsPerPass; ++g) {
    const uint8_t* rows = src + g * kRowsPerPass * row_bytes;
    uint8_t* o = dst + g * kRowsPerPass * row_bytes;
    for (int64_t b = 0; b < nb; b += 2) {
      const int64_t blocks = std::min<int64_t>(2, nb - b);  // 1 for an odd last block
      for (int64_t r = 0; r < kRowsPerPass; ++r)
        for (int64_t j = 0; j < blocks; ++j, o += qs_off)
          std::memcpy(o, rows + r * row_bytes + (b + j) * bytes, size_t(qs_off));
      for (int64_t r = 0; r < kRowsPerPass; ++r)
        for (int64_t j = 0; j < blocks; ++j, o += 16)
          std::memcpy(o, rows + r * row_bytes + (b + j) * bytes + qs_off, 16);
    }
  }
  return out;
}

}  // namespace pg::ops::cpu

namespace pg::ops {

std::optional<Tensor> PackMatmulWeightForCpu(const TensorView& w) {
  static const bool enabled = [] {
    const char* e = std::getenv("PEREGRINE_CPU_REPACK");
    return e == nullptr || std::string_view(e) != "0";
  }();
  // Only where a kernel that reads the layout may run (cpu_vnni_q8 or cpu_avx2_q8; tests cap
  // the priority to the reference kernels, which read the source layout only).
  if (!enabled || MaxKernelPriority() < kPriorityCpuAvx2 || !cpu::CanRepackRows4(w))
    return std::nullopt;
  return cpu::RepackRows4(w);
}

}  // namespace pg::ops
