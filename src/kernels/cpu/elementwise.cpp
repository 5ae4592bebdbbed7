// CPU backends of the row-wise ops: Embedding, RmsNorm (+ fused residual), Rope, SwiGlu,
// Add, KvWrite. AVX2 bodies, threaded over rows (tokens) with the default pool; small
// inputs stay on the calling thread (min chunk sizes below).
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/quant.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/kernel_util.h"
#include "kernels/rope_freq.h"

namespace pg::ops::cpu {
namespace {

using detail::RowF32;
using simd::Exp;
using simd::HSum;

// Elements per parallel chunk below which a loop stays on one thread.
constexpr int64_t kMinElemsPerChunk = 16384;

int64_t RowsPerChunk(int64_t row_elems) {
  return std::max<int64_t>(1, kMinElemsPerChunk / std::max<int64_t>(1, row_elems));
}

// ---- Embedding -------------------------------------------------------------------------------
void CpuEmbedding(const EmbeddingParams& p) {
  const int64_t hidden = p.table.dim(1);
  detail::CheckIds(p.ids, p.table.dim(0));
  ThreadPool::Default().ParallelFor(p.ids.dim(0), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      quant::DequantizeRow(p.table.dtype, p.table.row_ptr(p.ids.as<int32_t>()[t]),
                           RowF32(p.out, t), hidden);
  }, RowsPerChunk(hidden));
}

// ---- RmsNorm ---------------------------------------------------------------------------------
PG_TARGET_AVX2 void RmsNormRow(const float* x, float* res, const float* w, float* out,
                               int64_t h, float eps) {
  // v = res ? (res += x) : x;  out = v * rsqrt(mean(v^2) + eps) * w
  const float* v = x;
  if (res) {
    int64_t i = 0;
    for (; i + 8 <= h; i += 8)
      _mm256_storeu_ps(res + i, _mm256_add_ps(_mm256_loadu_ps(res + i), _mm256_loadu_ps(x + i)));
    for (; i < h; ++i) res[i] += x[i];
    v = res;
  }
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= h; i += 16) {
    __m256 v0 = _mm256_loadu_ps(v + i), v1 = _mm256_loadu_ps(v + i + 8);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
  }
  float ss = HSum(_mm256_add_ps(a0, a1));
  for (; i < h; ++i) ss += v[i] * v[i];
  const float inv = float(1.0 / std::sqrt(double(ss) / double(h) + double(eps)));
  const __m256 vinv = _mm256_set1_ps(inv);
  i = 0;
  for (; i + 8 <= h; i += 8)
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), vinv),
                                            _mm256_loadu_ps(w + i)));
  for (; i < h; ++i) out[i] = v[i] * inv * w[i];
}

void CpuRmsNorm(const RmsNormParams& p) {
  const int64_t h = p.x.dim(1);
  ThreadPool::Default().ParallelFor(p.x.dim(0), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      RmsNormRow(RowF32(p.x, r), p.residual.data ? RowF32(p.residual, r) : nullptr,
                 p.weight.as<float>(), RowF32(p.out, r), h, p.eps);
  }, RowsPerChunk(h));
}

// ---- Rope ------------------------------------------------------------------------------------
// cs: [half] cos then [half] sin of this token's angles.
PG_TARGET_AVX2 void RopeHeadNeox(float* x, const float* cs, int half) {
  float* x1 = x + half;
  const float* sn = cs + half;
  for (int i = 0; i < half; ++i) {
    float a = x[i], b = x1[i];
    x[i] = a * cs[i] - b * sn[i];
    x1[i] = b * cs[i] + a * sn[i];
  }
}
void RopeHeadInterleaved(float* x, const float* cs, int half) {
  const float* sn = cs + half;
  for (int i = 0; i < half; ++i) {
    float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * cs[i] - b * sn[i];
    x[2 * i + 1] = b * cs[i] + a * sn[i];
  }
}

void CpuRope(const RopeParams& p) {
  const int64_t heads = p.x.dim(1), head_dim = p.x.dim(2);
  const int half = RotaryDim(p.config, int(head_dim)) / 2;
  const std::vector<float> inv = RopeInvFreq(p.config, 2 * half);
  ThreadPool::Default().ParallelFor(p.x.dim(0), [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> cs;
    cs.resize(size_t(2 * half));
    for (int64_t t = t0; t < t1; ++t) {
      const float pos = float(p.positions.as<int32_t>()[t]);
      for (int i = 0; i < half; ++i) {
        double angle = double(inv[size_t(i)] * pos);  // float32 product, as HF
        cs[size_t(i)] = float(std::cos(angle));
        cs[size_t(half + i)] = float(std::sin(angle));
      }
      float* row = RowF32(p.x, t);
      for (int64_t h = 0; h < heads; ++h) {
        if (p.config.neox) RopeHeadNeox(row + h * head_dim, cs.data(), half);
        else RopeHeadInterleaved(row + h * head_dim, cs.data(), half);
      }
    }
  }, RowsPerChunk(heads * head_dim * 4));
}

// ---- SwiGlu / Add ----------------------------------------------------------------------------
PG_TARGET_AVX2 void SwiGluRow(const float* g, const float* u, float* o, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 gv = _mm256_loadu_ps(g + i);
    __m256 e = Exp(_mm256_sub_ps(_mm256_setzero_ps(), gv));
    __m256 silu = _mm256_div_ps(gv, _mm256_add_ps(one, e));
    _mm256_storeu_ps(o + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
  }
  for (; i < n; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void CpuSwiGlu(const SwiGluParams& p) {
  const int64_t inter = p.out.dim(1);
  ThreadPool::Default().ParallelFor(p.out.dim(0), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* g = RowF32(p.gate, r);
      SwiGluRow(g, p.up.data ? RowF32(p.up, r) : g + inter, RowF32(p.out, r), inter);
    }
  }, RowsPerChunk(inter * 4));
}

PG_TARGET_AVX2 void AddRange(const float* a, const float* b, float* o, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(o + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  for (; i < n; ++i) o[i] = a[i] + b[i];
}

void CpuAdd(const AddParams& p) {
  ThreadPool::Default().ParallelFor(p.out.numel(), [&](int64_t i0, int64_t i1) {
    AddRange(p.a.as<float>() + i0, p.b.as<float>() + i0, p.out.as<float>() + i0, i1 - i0);
  }, 4 * kMinElemsPerChunk);
}

// ---- KvWrite (f32 cache) ---------------------------------------------------------------------
void CpuKvWrite(const KvWriteParams& p) {
  const AttentionBatch& b = *p.batch;
  const int64_t row_elems = p.k.dim(1) * p.k.dim(2);
  for (int s = 0; s < b.num_seqs; ++s) {
    const int64_t first = b.kv_len[size_t(s)] - b.q_len[size_t(s)];
    for (int64_t i = 0; i < b.q_len[size_t(s)]; ++i) {
      const int64_t t = first + i, row = b.q_start[size_t(s)] + i;
      const int64_t off = detail::CacheOffset(p.cache.k_cache, detail::PageOf(b, s, t),
                                              t % b.page_size, 0);
      float* kd = p.cache.k_cache.as<float>() + off;
      float* vd = p.cache.v_cache.as<float>() + off;
      const float* ks = RowF32(p.k, row);
      const float* vs = RowF32(p.v, row);
      if (p.cache.k_scale == 1.0f && p.cache.v_scale == 1.0f) {
        std::memcpy(kd, ks, size_t(row_elems) * sizeof(float));
        std::memcpy(vd, vs, size_t(row_elems) * sizeof(float));
      } else {
        for (int64_t e = 0; e < row_elems; ++e) {
          kd[e] = ks[e] / p.cache.k_scale;
          vd[e] = vs[e] / p.cache.v_scale;
        }
      }
    }
  }
}

bool Avx2() { return Features().avx2; }

}  // namespace

void RegisterElementwise(Registry& r) {
  const int prio = kPriorityCpuAvx2;
  r.Register(KernelImpl<EmbeddingParams>{"cpu", Device::kCpu, kPriorityCpuGeneric, {},
                                         &CpuEmbedding});
  // The AVX2 kernels are registered only where they run: the table lists what this process
  // can run (the op harness checks each registered backend takes some case).
  if (Avx2()) {
  r.Register(KernelImpl<RmsNormParams>{
      "cpu_avx2", Device::kCpu, prio,
      [](const RmsNormParams& p) { return Avx2() && p.weight.dtype == DType::kF32; },
      &CpuRmsNorm});
  r.Register(KernelImpl<RopeParams>{"cpu_avx2", Device::kCpu, prio,
                                    [](const RopeParams&) { return Avx2(); }, &CpuRope});
  r.Register(KernelImpl<SwiGluParams>{"cpu_avx2", Device::kCpu, prio,
                                      [](const SwiGluParams&) { return Avx2(); }, &CpuSwiGlu});
  r.Register(KernelImpl<AddParams>{"cpu_avx2", Device::kCpu, prio,
                                   [](const AddParams&) { return Avx2(); }, &CpuAdd});
  }
  r.Register(KernelImpl<KvWriteParams>{
      "cpu", Device::kCpu, kPriorityCpuGeneric,
      [](const KvWriteParams& p) { return p.cache.k_cache.dtype == DType::kF32; },
      &CpuKvWrite});
}

}  // namespace pg::ops::cpu
