// Decode-time Matmul (few activation rows): reads GGUF weights in place.
//  * Q4_0 / Q4_1 / Q8_0: activations quantized to int8 blocks (q8_act.h), int8 dot products
//    with AVX2 (vpmaddubsw; Q8_0 here, four activation rows per weight block; Q4 in
//    matmul_gemv_q4_avx2.cpp, four weight rows per pass) or AVX-512 VNNI (vpdpbusd /
//    vpdpwssd, four weight rows per pass: matmul_gemv_vnni.cpp); per-block scales in f32.
//    Parallel over output rows; every weight row is read once for all activation rows.
//  * other dtypes (F32/F16/BF16, K-quants, ...): f32 dot products with FMA against the row
//    converted on the fly (F16/BF16) or dequantized into a per-thread scratch row.
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/quant.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/q8_act.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/kernel_util.h"

namespace pg::ops::cpu {

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
  for (int64_t b = 0; b < k / 32; ++b, x += 32)
    out[b].sum = simd::QuantizeBlock32(x, out[b].qs, &out[b].d);
}

namespace {

// ---- Q8_0 int8 block dot products (vpmaddubsw + vpmaddwd) ----------------------------------

PG_TARGET_AVX2 inline __m256i Nibbles(const uint8_t* qs) {
  __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

PG_TARGET_AVX2 inline __m256i DotU8S8Avx2(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

PG_TARGET_AVX2 inline float F16(uint16_t h) { return _cvtsh_ss(h); }

// RA activation rows (row r's blocks at a + r * nb) against one Q8_0 weight row w:
//   out[r] = Σ_b w_d · a_d · dot(q_w, q_a).
// Every row runs the same instruction sequence whatever RA is, so a row's result does not
// depend on how many rows share the call (batch invariance, batch_invariance_test.cpp). The
// weight block's sign trick (|q_w|, sign moved onto q_a) is done once for all RA rows. (Q4_0 /
// Q4_1 run matmul_gemv_q4_avx2.cpp's 4-row kernel.)
template <int RA>
PG_TARGET_AVX2 void DotRowsQ8Avx2(const BlockQ8_0* w, const ActBlock* a, int64_t nb, float* out) {
  __m256 acc[RA];
  for (int r = 0; r < RA; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const float wd = F16(w[b].d);
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
    const __m256i wq = _mm256_sign_epi8(raw, raw);  // unsigned operand of the u8 x s8 products
    for (int r = 0; r < RA; ++r) {
      const ActBlock& x = a[r * nb + b];
      const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs));
      const __m256i d = DotU8S8Avx2(wq, _mm256_sign_epi8(q8, raw));
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(wd * x.d), _mm256_cvtepi32_ps(d), acc[r]);
    }
  }
  for (int r = 0; r < RA; ++r) out[r] = HSum(acc[r]);
}

// Rows of x handled by the GEMV kernels; above this the GEMM path (matmul_gemm.cpp) wins.
constexpr int64_t kGemvMaxRows = 16;
// Output rows per parallel chunk: keeps small matrices on one thread (wake-up cost).
constexpr int64_t kMinRowsPerChunk = 64;
// Activation rows per DotRowsQ8Avx2 call (accumulators stay in registers).
constexpr int kRowsPerDot = 4;

void Store(const MatmulParams& p, int64_t r, int64_t j, float v) {
  if (p.bias.data) v += p.bias.as<float>()[j];
  float& o = detail::RowF32(p.out, r)[j];
  o = p.accumulate ? o + v : v;
}

void GemvQ8Rows(const MatmulParams& p, const ActBlock* a, int64_t n, int64_t nb) {
  ThreadPool::Default().ParallelFor(p.w.dim(0), [&](int64_t j0, int64_t j1) {
    float v[kRowsPerDot];
    for (int64_t j = j0; j < j1; ++j) {
      // Quantized rows are whole blocks (tensor.h), so a row starts on a block.
      const auto* w = reinterpret_cast<const BlockQ8_0*>(p.w.row_ptr(j));
      int64_t r = 0;
      for (; r + kRowsPerDot <= n; r += kRowsPerDot) {
        DotRowsQ8Avx2<kRowsPerDot>(w, a + r * nb, nb, v);
        for (int i = 0; i < kRowsPerDot; ++i) Store(p, r + i, j, v[i]);
      }
      for (; r < n; ++r) {
        DotRowsQ8Avx2<1>(w, a + r * nb, nb, v);
        Store(p, r, j, v[0]);
      }
    }
  }, kMinRowsPerChunk);
}

// Q4_0 / Q4_1 (and their RepackRows4 layouts): matmul_gemv_q4_avx2.cpp; Q8_0: above.
void GemvQuantAvx2(const MatmulParams& p) {
  if (GemvQ4Avx2Reads(p.w.dtype)) return GemvQ4Avx2Many({&p, 1});
  PG_CHECK(p.w.dtype == DType::kQ8_0, "GemvQuantAvx2: dtype {}", Name(p.w.dtype));
  const int64_t n = p.x.dim(0), k = p.x.dim(1), nb = k / 32;
  thread_local std::vector<ActBlock> act;
  act.resize(size_t(n * nb));
  for (int64_t r = 0; r < n; ++r) QuantizeActAvx2(detail::RowF32(p.x, r), &act[size_t(r * nb)], k);
  GemvQ8Rows(p, act.data(), n, nb);
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
  RegisterGemm(r);
  // Registered only where they run (as below; RegisterElementwise).
  if (!Features().avx2) return;
  r.Register(KernelImpl<MatmulParams>{
      "cpu_avx2_q8", Device::kCpu, kPriorityCpuAvx2,
      [](const MatmulParams& p) {
        return Features().avx2 && (p.w.dtype == DType::kQ8_0 || GemvQ4Avx2Reads(p.w.dtype));
      },
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
}

}  // namespace pg::ops::cpu
