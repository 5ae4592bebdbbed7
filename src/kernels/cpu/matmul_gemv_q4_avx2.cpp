// Decode GEMV for Q4_0 / Q4_1 weights (and their RepackRows4 layouts) with AVX2, for CPUs
// without AVX-512 VNNI (AMD Zen 2/3, most Intel laptops; those with AVX-VNNI, Intel 12th
// generation on, take its 256-bit vpdpbusd for the block dot products: same bits).
//
// Activations: int8 blocks (as llama.cpp's q8_0 activations), laid out per PAIR of blocks
// (Act, below) so that one 32-byte load of a weight pair's nibbles lines up with them:
//   lo nibbles of [b0 | b1] = elements [b0 0-15 | b1 0-15], hi nibbles = [b0 16-31 | b1 16-31].
// Per pair and per weight row r of a group of 4: vpmaddubsw of lo and of hi against the
// activation halves, added in int16 (|sum| <= 4 * 15 * 127 fits), vpmaddwd to 8 int32 lanes
// [b0 x4 | b1 x4]. Three vphaddd fold the 4 rows into ONE vector
//   h = [r0 b0, r1 b0, r2 b0, r3 b0 | r0 b1, r1 b1, r2 b1, r3 b1]   (exact block dot products)
// so each pair costs one convert and one fma for all 4 rows: acc += h * (dw * da), lane-wise.
// Offsets fold through the activation sums s = da * Σq (Q4_0: -8 * dw * s; Q4_1: + m * s) into
// a second accumulator. Row r's result = its two lanes (r, r + 4) summed at the end.
//
// Bits: lane r's operations depend only on weight row r and the activation row, whatever the
// other lanes hold, so a group padded with copies of its last row (m % 4 tail), a RepackRows4
// group (the same values loaded into the same lanes), and any number of activation rows per
// pass all give every row the same bits (batch_invariance_test.cpp). An odd last block is a
// pair whose b1 has zero activations and zero weight scales: its lanes add +0.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/quant.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemv_jobs.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/registry.h"

namespace pg::ops::cpu {
namespace {

// One activation row: per pair p (blocks 2p, 2p + 1; an odd last block pairs with zeros)
//   qs[p * 64 ..]: [b0 0-15 | b1 0-15 | b0 16-31 | b1 16-31] int8,
//   sc[p * 16 ..]: [da0 x4 | da1 x4 | s0 x4 | s1 x4] f32, s = da * Σ q (the block's sum).
struct Act {
  int8_t* qs;
  float* sc;
};

PG_TARGET_AVX2 void QuantizeAct(const float* x, int64_t nb, const Act& a) {
  alignas(32) int8_t q[32];
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    float d;
    const int32_t sum = simd::QuantizeBlock32(x, q, &d);
    int8_t* dst = a.qs + (b / 2) * 64 + (b % 2) * 16;
    std::memcpy(dst, q, 16);
    std::memcpy(dst + 32, q + 16, 16);
    float* sc = a.sc + (b / 2) * 16 + (b % 2) * 4;
    for (int i = 0; i < 4; ++i) sc[i] = d, sc[8 + i] = d * float(sum);
  }
  if (nb % 2) {  // the zero partner of an odd last block
    int8_t* dst = a.qs + (nb / 2) * 64 + 16;
    std::memset(dst, 0, 16);
    std::memset(dst + 32, 0, 16);
    float* sc = a.sc + (nb / 2) * 16 + 4;
    for (int i = 0; i < 4; ++i) sc[i] = 0.0f, sc[8 + i] = 0.0f;
  }
}

struct Layout {
  bool q4_1;   // else Q4_0
  bool rows4;  // RepackRows4's interleaved group, else 4 row pointers of the source
};

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

PG_TARGET_AVX2 inline void Prefetch(const uint8_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}

// DotGroup, per instruction set (matmul_gemv_q4_avx2_dot.inc).
namespace avx2 {
#define PG_Q4_TARGET PG_TARGET_AVX2
#define PG_Q4_AVXVNNI 0
#include "kernels/cpu/matmul_gemv_q4_avx2_dot.inc"
#undef PG_Q4_TARGET
#undef PG_Q4_AVXVNNI
}  // namespace avx2
namespace avxvnni {
#define PG_Q4_TARGET PG_TARGET_AVXVNNI
#define PG_Q4_AVXVNNI 1
#include "kernels/cpu/matmul_gemv_q4_avx2_dot.inc"
#undef PG_Q4_TARGET
#undef PG_Q4_AVXVNNI
}  // namespace avxvnni

constexpr int64_t kActsPerPass = 2;  // activation rows sharing each weight unpack (prefill)
constexpr int64_t kMaxActRows = 16;  // the registry sends at most kGemvMaxRows rows

// Per activation row: npairs * 64 bytes of qs, npairs * 16 floats of sc.
int64_t ActRowQs(int64_t nb) { return (nb + 1) / 2 * 64; }
int64_t ActRowSc(int64_t nb) { return (nb + 1) / 2 * 16; }

template <bool kQ4_1, bool kRows4, bool kVnni>
void RunGroup(const GemvJob& job, int64_t g) {
  const MatmulParams& p = *job.p;
  const int64_t nb = job.nb, j0 = g * kGemvGroupRows,
                rows_here = std::min(kGemvGroupRows, job.m - j0);
  const uint8_t* rows[kGemvGroupRows];
  const uint8_t* ahead[kGemvGroupRows];  // the next group's rows (this group's at the end)
  for (int64_t i = 0; i < kGemvGroupRows; ++i) {  // a short last group repeats its last row
    const int64_t j = j0 + std::min(i, rows_here - 1);
    rows[i] = job.w0 + j * job.row_bytes;
    ahead[i] = j + kGemvGroupRows < job.m ? rows[i] + kGemvGroupRows * job.row_bytes : rows[i];
  }
  auto act = [&](int64_t r) {
    return Act{static_cast<int8_t*>(job.qs) + r * ActRowQs(nb), job.ds + r * ActRowSc(nb)};
  };
  float v[kActsPerPass * kGemvGroupRows];
  int64_t r = 0;
  for (; r + kActsPerPass <= job.n; r += kActsPerPass) {
    const Act two[kActsPerPass] = {act(r), act(r + 1)};
    if constexpr (kVnni) avxvnni::DotGroup<kQ4_1, kRows4, kActsPerPass>(rows, ahead, two, nb, v);
    else avx2::DotGroup<kQ4_1, kRows4, kActsPerPass>(rows, ahead, two, nb, v);
    for (int64_t a = 0; a < kActsPerPass; ++a) StoreGroup(p, r + a, j0, rows_here, v + a * kGemvGroupRows);
  }
  for (; r < job.n; ++r) {
    const Act one = act(r);
    if constexpr (kVnni) avxvnni::DotGroup<kQ4_1, kRows4, 1>(rows, ahead, &one, nb, v);
    else avx2::DotGroup<kQ4_1, kRows4, 1>(rows, ahead, &one, nb, v);
    StoreGroup(p, r, j0, rows_here, v);
  }
}

std::atomic<bool> g_use_avx_vnni{Features().avx_vnni};

template <bool kVnni>
void (*PickRun(DType t))(const GemvJob&, int64_t) {
  switch (t) {
    case DType::kQ4_0: return &RunGroup<false, false, kVnni>;
    case DType::kQ4_1: return &RunGroup<true, false, kVnni>;
    case DType::kQ4_0x4: return &RunGroup<false, true, kVnni>;
    case DType::kQ4_1x4: return &RunGroup<true, true, kVnni>;
    default: PG_CHECK(false, "GemvQ4Avx2: dtype {}", Name(t));
  }
  return nullptr;
}

int64_t ActBytes(const MatmulParams& p) {
  const int64_t n = p.x.dim(0), nb = p.x.dim(1) / 32;
  return CacheLines(n * ActRowQs(nb)) + CacheLines(n * ActRowSc(nb) * 4);
}

GemvJob Prepare(const MatmulParams& p, uint8_t* arena) {
  GemvJob j;
  j.p = &p;
  j.run = g_use_avx_vnni.load(std::memory_order_relaxed) ? PickRun<true>(p.w.dtype)
                                                         : PickRun<false>(p.w.dtype);
  const bool q4_1 = p.w.dtype == DType::kQ4_1 || p.w.dtype == DType::kQ4_1x4;
  j.n = p.x.dim(0);
  j.nb = p.x.dim(1) / 32;
  j.m = p.w.dim(0);
  j.groups = (j.m + kGemvGroupRows - 1) / kGemvGroupRows;
  j.w0 = p.w.row_ptr(0);
  j.row_bytes = p.w.strides[0] / quant::kQK * (q4_1 ? Q4<true>::kBytes : Q4<false>::kBytes);
  PG_CHECK(j.n <= kMaxActRows, "GemvQ4Avx2: {} rows", j.n);
  j.qs = arena;
  j.ds = reinterpret_cast<float*>(arena + CacheLines(j.n * ActRowQs(j.nb)));
  for (int64_t r = 0; r < j.n; ++r)
    QuantizeAct(detail::RowF32(p.x, r), j.nb,
                Act{static_cast<int8_t*>(j.qs) + r * ActRowQs(j.nb), j.ds + r * ActRowSc(j.nb)});
  return j;
}

}  // namespace

void UseAvxVnniForQ4(bool on) { g_use_avx_vnni = on && Features().avx_vnni; }

bool GemvQ4Avx2Reads(DType t) {
  return t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ4_0x4 || t == DType::kQ4_1x4;
}

bool GemvQ4Avx2Takes(const MatmulParams& p) {
  return Features().avx2 && MaxKernelPriority() >= kPriorityCpuAvx2 && GemvQ4Avx2Reads(p.w.dtype) &&
         p.x.dim(0) <= kMaxActRows && !p.w_scale.data;
}

void GemvQ4Avx2Many(std::span<const MatmulParams> ps) {
  RunGemvJobs(ps, GemvFamily{&ActBytes, &Prepare});
}

}  // namespace pg::ops::cpu
