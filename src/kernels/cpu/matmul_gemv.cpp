// Decode-time Matmul (few activation rows): reads GGUF weights in place.
//  * Q4_0 / Q4_1 / Q8_0: activations quantized to int8 blocks (q8_act.h), int8 dot products
//    with AVX2 (vpmaddubsw, here: four activation rows per unpacked weight block) or AVX-512
//    VNNI (512-bit vpdpbusd, four rows per pass: matmul_gemv_vnni.cpp); per-block scales in f32. Parallel over output rows; every weight
//    row is read once for all activation rows.
//  * other dtypes (F32/F16/BF16, K-quants, ...): f32 dot products with FMA against the row
//    converted on the fly (F16/BF16) or dequantized into a per-thread scratch row.
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/quant.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/q8_act.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/kernel_util.h"

namespace pg::ops::cpu {

using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ8_0;
using simd::HSum;

void QuantizeActScalar(const float* x, ActBlock* out, int64_t k) {
  for (int64_t b = 0; b < k / 32; ++b, x += 32) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) {
      int q = int(std::nearbyint(x[i] * id));
      out[b].qs[i] = int8_t(q);
      sum += q;
    }
    out[b].d = d;
    out[b].sum = sum;
  }
}

PG_TARGET_AVX2 void QuantizeActAvx2(const float* x, ActBlock* out, int64_t k) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < k / 32; ++b, x += 32) {
    __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
    __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign_mask, v0), _mm256_andnot_ps(sign_mask, v1)),
                             _mm256_max_ps(_mm256_andnot_ps(sign_mask, v2), _mm256_andnot_ps(sign_mask, v3)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
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
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs), p);
    out[b].d = d;
    out[b].sum = _mm_cvtsi128_si32(s4);
  }
}

namespace {

// ---- int8 block dot products ---------------------------------------------------------------
// Each returns Σ_blocks of the block's dot product for one weight row and one activation row.
// kVnni selects vpdpbusd; otherwise vpmaddubsw + vpmaddwd. Nibble order (ggml): byte j holds
// element j (low nibble) and element j + 16 (high nibble).

PG_TARGET_AVX2 inline __m256i Nibbles(const uint8_t* qs) {
  __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

PG_TARGET_AVX2 inline __m256i DotU8S8Avx2(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

PG_TARGET_AVX2 inline float F16(uint16_t h) { return _cvtsh_ss(h); }

// RA activation rows (row r's blocks at a + r * nb) against one weight row w:
//   out[r] = Σ_b w_d · a_d · dot(q_w, q_a)  (Q4_0: − 8 · Σ q_a inside the integer dot; Q4_1:
//   + w_m · a_d · Σ q_a, summed apart and added last).
// Every row runs the same instruction sequence whatever RA is, so a row's result does not
// depend on how many rows share the call (batch invariance, batch_invariance_test.cpp). The
// weight block is unpacked (and its scales widened) once for all RA rows: what makes
// prefill's 16-row slices cheap. (Four weight rows against one activation row, for decode's
// ILP, measured slower on an AVX2 EPYC: tg256 26-32 vs 38-41 tokens/s; not used.)
template <typename Block, int RA>
PG_TARGET_AVX2 void DotRowsAvx2(const Block* w, const ActBlock* a, int64_t nb, float* out) {
  constexpr bool kQ8 = std::is_same_v<Block, BlockQ8_0>;
  constexpr bool kQ4_1 = std::is_same_v<Block, BlockQ4_1>;
  __m256 acc[RA];
  float offs[RA];
  for (int r = 0; r < RA; ++r) acc[r] = _mm256_setzero_ps(), offs[r] = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const float wd = F16(w[b].d);
    float wm = 0.0f;  // Q4_1's offset
    if constexpr (kQ4_1) wm = F16(w[b].m);
    __m256i raw, wq;  // wq: unsigned operand of the u8 x s8 products (Q4 nibbles, |Q8|)
    if constexpr (kQ8) {
      raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
      wq = _mm256_sign_epi8(raw, raw);
    } else {
      wq = Nibbles(w[b].qs);
    }
    for (int r = 0; r < RA; ++r) {
      const ActBlock& x = a[r * nb + b];
      const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs));
      __m256i d;
      if constexpr (kQ8) {
        d = DotU8S8Avx2(wq, _mm256_sign_epi8(q8, raw));
      } else {
        d = DotU8S8Avx2(wq, q8);
      }
      if constexpr (std::is_same_v<Block, BlockQ4_0>) {
        d = _mm256_sub_epi32(d, _mm256_set_epi32(0, 0, 0, 0, 0, 0, 0, 8 * x.sum));
      }
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(wd * x.d), _mm256_cvtepi32_ps(d), acc[r]);
      if constexpr (kQ4_1) offs[r] += wm * x.d * float(x.sum);
    }
  }
  for (int r = 0; r < RA; ++r) out[r] = kQ4_1 ? HSum(acc[r]) + offs[r] : HSum(acc[r]);
}

// Rows of x handled by the GEMV kernels; above this the GEMM path (matmul_gemm.cpp) wins.
constexpr int64_t kGemvMaxRows = 16;
// Output rows per parallel chunk: keeps small matrices on one thread (wake-up cost).
constexpr int64_t kMinRowsPerChunk = 64;
// Activation rows per DotRowsAvx2 call (accumulators stay in registers).
constexpr int kRowsPerDot = 4;

void Store(const MatmulParams& p, int64_t r, int64_t j, float v) {
  if (p.bias.data) v += p.bias.as<float>()[j];
  float& o = detail::RowF32(p.out, r)[j];
  o = p.accumulate ? o + v : v;
}

template <typename Block>
void GemvQuantRows(const MatmulParams& p, const ActBlock* a, int64_t n, int64_t nb) {
  ThreadPool::Default().ParallelFor(p.w.dim(0), [&](int64_t j0, int64_t j1) {
    float v[kRowsPerDot];
    for (int64_t j = j0; j < j1; ++j) {
      // Quantized rows are whole blocks (tensor.h), so a row starts on a block.
      const Block* w = reinterpret_cast<const Block*>(p.w.row_ptr(j));
      int64_t r = 0;
      for (; r + kRowsPerDot <= n; r += kRowsPerDot) {
        DotRowsAvx2<Block, kRowsPerDot>(w, a + r * nb, nb, v);
        for (int i = 0; i < kRowsPerDot; ++i) Store(p, r + i, j, v[i]);
      }
      for (; r < n; ++r) {
        DotRowsAvx2<Block, 1>(w, a + r * nb, nb, v);
        Store(p, r, j, v[0]);
      }
    }
  }, kMinRowsPerChunk);
}

void GemvQuantAvx2(const MatmulParams& p) {
  const int64_t n = p.x.dim(0), k = p.x.dim(1), nb = k / 32;
  thread_local std::vector<ActBlock> act;
  act.resize(size_t(n * nb));
  for (int64_t r = 0; r < n; ++r) QuantizeActAvx2(detail::RowF32(p.x, r), &act[size_t(r * nb)], k);
  switch (p.w.dtype) {
    case DType::kQ4_0: return GemvQuantRows<BlockQ4_0>(p, act.data(), n, nb);
    case DType::kQ4_1: return GemvQuantRows<BlockQ4_1>(p, act.data(), n, nb);
    case DType::kQ8_0: return GemvQuantRows<BlockQ8_0>(p, act.data(), n, nb);
    default: PG_CHECK(false, "GemvQuantAvx2: dtype {}", Name(p.w.dtype));
  }
}

// ---- f32 dot products for the other dtypes ----------------------------------------------------

PG_TARGET_AVX2 float DotF32(const float* w, const float* x, int64_t k) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
  }
  float s = HSum(_mm256_add_ps(a0, a1));
  for (; i < k; ++i) s += w[i] * x[i];
  return s;
}

PG_TARGET_AVX2 float DotF16(const uint16_t* w, const float* x, int64_t k) {
  __m256 a0 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    __m256 wf = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i)));
    a0 = _mm256_fmadd_ps(wf, _mm256_loadu_ps(x + i), a0);
  }
  float s = HSum(a0);
  for (; i < k; ++i) s += F16(w[i]) * x[i];
  return s;
}

PG_TARGET_AVX2 float DotBF16(const uint16_t* w, const float* x, int64_t k) {
  __m256 a0 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    __m256i wi = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i)));
    a0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(wi, 16)), _mm256_loadu_ps(x + i), a0);
  }
  float s = HSum(a0);
  for (; i < k; ++i) s += Bf16ToF32(w[i]) * x[i];
  return s;
}

void GemvFloat(const MatmulParams& p) {
  const int64_t n = p.x.dim(0), k = p.x.dim(1), m = p.w.dim(0);
  const DType dt = p.w.dtype;
  ThreadPool::Default().ParallelFor(m, [&](int64_t j0, int64_t j1) {
    thread_local std::vector<float> scratch;
    for (int64_t j = j0; j < j1; ++j) {
      const void* w = p.w.row_ptr(j);
      const float* wf = static_cast<const float*>(w);
      if (dt != DType::kF32 && dt != DType::kF16 && dt != DType::kBF16) {
        scratch.resize(size_t(k));
        quant::DequantizeRow(dt, w, scratch.data(), k);
        if (p.w_scale.data) detail::ScaleWeightRow(p.w_scale, j, scratch.data(), k);
        wf = scratch.data();
      }
      for (int64_t r = 0; r < n; ++r) {
        const float* x = detail::RowF32(p.x, r);
        float v = dt == DType::kF16    ? DotF16(static_cast<const uint16_t*>(w), x, k)
                  : dt == DType::kBF16 ? DotBF16(static_cast<const uint16_t*>(w), x, k)
                                       : DotF32(wf, x, k);
        Store(p, r, j, v);
      }
    }
  }, kMinRowsPerChunk);
}

bool IsInt8Type(DType t) { return t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ8_0; }

}  // namespace

void RegisterGemm(Registry& r);            // matmul_gemm.cpp
void GemvQuantVnni512(const MatmulParams& p);  // matmul_gemv_vnni.cpp

// Batch invariance (docs/design/engine.md): a row's result must not depend on the other rows
// of the batch, so every batch size runs the same row kernel, in slices of at most
// kGemvMaxRows rows (the kernels compute each row identically whatever the slice size;
// tests/ops/batch_invariance_test.cpp checks it bitwise). OpenBLAS stays registered below for
// dtypes and CPUs the row kernels do not cover.
template <void (*kKernel)(const MatmulParams&)>
void RowSliced(const MatmulParams& p) {
  const int64_t n = p.x.dim(0);
  if (n <= kGemvMaxRows) return kKernel(p);
  for (int64_t r0 = 0; r0 < n; r0 += kGemvMaxRows) {
    const int64_t rows = std::min(kGemvMaxRows, n - r0);
    MatmulParams s = p;
    s.x = p.x.Slice0(r0, rows);
    s.out = p.out.Slice0(r0, rows);
    kKernel(s);
  }
}

void RegisterMatmul(Registry& r) {
  r.Register(KernelImpl<MatmulParams>{
      "cpu_avx2_q8", Device::kCpu, kPriorityCpuAvx2,
      [](const MatmulParams& p) { return Features().avx2 && IsInt8Type(p.w.dtype); },
      &RowSliced<GemvQuantAvx2>});
  // Registered only on a CPU with AVX-512 VNNI (AVX2-only machines, e.g. AMD Zen 2/3 and most
  // laptops, run cpu_avx2_q8): the table lists what this process can run, so the op harness's
  // coverage check (every backend takes some case) holds on every machine.
  if (Features().vnni)
    r.Register(KernelImpl<MatmulParams>{
        "cpu_vnni_q8", Device::kCpu, kPriorityCpuAvx512,
        [](const MatmulParams& p) { return Features().vnni && GemvQuantVnni512Reads(p.w.dtype); },
        &RowSliced<GemvQuantVnni512>});
  // Below the int8 kernels: for the int8 types they win when capable.
  r.Register(KernelImpl<MatmulParams>{
      "cpu_avx2_gemv", Device::kCpu, kPriorityCpuAvx2 - 1,
      [](const MatmulParams& p) { return Features().avx2 && !IsRows4(p.w.dtype); },
      &RowSliced<GemvFloat>});
  RegisterGemm(r);
}

}  // namespace pg::ops::cpu
