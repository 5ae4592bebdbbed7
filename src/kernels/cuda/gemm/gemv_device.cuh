// Device helpers shared by the decode GEMV kernels: gemv.cu (one warp per output row) and
// gemv_ring.cu (a producer warp streams weight tiles into a shared-memory ring). Shapes and
// the fused options: GemvArgs (common/device_params.h). Every helper fixes a rounding point
// or a summation order, so both kernels compute bitwise the same outputs: a lane sums its
// 16-byte chunks lane, lane + 32, lane + 64, ... of a row in that order (Dot8), then the warp
// reduces with the xor butterfly (WarpStore).
#pragma once

#include <cuda_bf16.h>

#include "kernels/cuda/common/device_params.h"
#include "kernels/cuda/elementwise/row_device.cuh"

namespace pg::cuda::gemv {

// 8 bf16 values (a 16-byte chunk) widened to f32 (exact): elements 0-3 in lo, 4-7 in hi.
__device__ __forceinline__ void Widen8(const uint4& v, float4& lo, float4& hi) {
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
  const float2 a = __bfloat1622float2(p[0]), b = __bfloat1622float2(p[1]);
  const float2 c = __bfloat1622float2(p[2]), d = __bfloat1622float2(p[3]);
  lo = make_float4(a.x, a.y, b.x, b.y);
  hi = make_float4(c.x, c.y, d.x, d.y);
}

// acc += dot(8 bf16 weights, 8 activations): the 8 products summed in element order into a
// part, then one add to acc. Only that add depends on acc, so a lane's consecutive chunks (an
// unrolled loop) overlap their FMA chains: 1 dependent op a chunk instead of 8 (the ring GEMV's
// consumers were latency-bound on the 8-deep chain: docs/PERF.md "Session 14"). x2(q): the
// activations 2q, 2q + 1 as f32, taken in q order (the forms below give the same bits).
template <typename X2>
__device__ __forceinline__ void Dot8Of(const uint4& wv, X2 x2, float& acc) {
  const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&wv);
  const float2 w0 = __bfloat1622float2(w2[0]), x0 = x2(0);
  float part = w0.x * x0.x;
  part = fmaf(w0.y, x0.y, part);
#pragma unroll
  for (int q = 1; q < 4; ++q) {
    const float2 wf = __bfloat1622float2(w2[q]);
    const float2 xf = x2(q);
    part = fmaf(wf.x, xf.x, part);
    part = fmaf(wf.y, xf.y, part);
  }
  acc += part;
}
// 8 bf16 activations.
__device__ __forceinline__ void Dot8(const uint4& wv, const uint4& xv, float& acc) {
  const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&xv);
  Dot8Of(wv, [&](int q) { return __bfloat1622float2(x2[q]); }, acc);
}
// 8 activations already widened (xa: elements 0-3, xb: 4-7; exact f32 values of bf16).
__device__ __forceinline__ void Dot8(const uint4& wv, const float4& xa, const float4& xb, float& acc) {
  Dot8Of(wv, [&](int q) {
    const float4& h = q < 2 ? xa : xb;
    return q % 2 ? make_float2(h.z, h.w) : make_float2(h.x, h.y);
  }, acc);
}

__device__ __forceinline__ float SumSq8(const uint4& v) {
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
  float s = 0.0f;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float2 f = __bfloat1622float2(p[q]);
    s = fmaf(f.x, f.x, s);
    s = fmaf(f.y, f.y, s);
  }
  return s;
}

// The rows to stage (StageRowsOf): x's rows (row stride ldx, k columns, k % 8 == 0) and,
// with norm_weight, RmsNorm's parameters.
struct StageSource {
  const bf16* x;
  int64_t ldx, k;
  const void* norm_weight;  // null: copy as is
  WeightType norm_type;
  float norm_eps;
};

// Where staged rows live. Bf16Staging: row r's 16-byte chunk i (8 bf16) at staged[r * ld + i].
struct Bf16Staging {
  uint4* staged;
  int64_t ld;  // 16-byte chunks a row
  __device__ __forceinline__ void Put(int r, int64_t i, const uint4& v) const { staged[r * ld + i] = v; }
  __device__ __forceinline__ uint4 Get(int r, int64_t i) const { return staged[r * ld + i]; }
};

// F32Staging: the same bf16 values widened to f32 (exact), so consumers skip the widening.
// Chunk i's 8 values are two float4s, Read(r, i).lo at F32Lo(i) of the row and .hi 32 float4s
// later: a warp reading chunks lane + 32 m touches 32 consecutive float4s a load (no bank
// conflicts). Row stride F32RowVecs(k) float4s.
__host__ __device__ constexpr int64_t F32RowVecs(int64_t k) { return (k / 8 + 31) / 32 * 64; }
__host__ __device__ constexpr int64_t F32Lo(int64_t i) { return i / 32 * 64 + i % 32; }
struct F32Staging {
  static constexpr int kHi = 32;  // float4s from a chunk's lo half to its hi half
  struct Chunk {
    float4 lo, hi;
  };
  float4* f;
  int64_t ld;  // F32RowVecs(k)
  __device__ __forceinline__ Chunk Read(int r, int64_t i) const {
    const float4* p = f + r * ld + F32Lo(i);
    return {p[0], p[kHi]};
  }
  __device__ __forceinline__ void Put(int r, int64_t i, const uint4& v) const {
    float4* p = f + r * ld + F32Lo(i);
    Widen8(v, p[0], p[kHi]);
  }
  __device__ __forceinline__ uint4 Get(int r, int64_t i) const {  // exact: the values are bf16
    const Chunk c = Read(r, i);
    uint4 v;
    __nv_bfloat162* p = reinterpret_cast<__nv_bfloat162*>(&v);
    p[0] = __floats2bfloat162_rn(c.lo.x, c.lo.y), p[1] = __floats2bfloat162_rn(c.lo.z, c.lo.w);
    p[2] = __floats2bfloat162_rn(c.hi.x, c.hi.y), p[3] = __floats2bfloat162_rn(c.hi.z, c.hi.w);
    return v;
  }
};

// Stages `rows` rows of src into `out` (a Bf16Staging or F32Staging; k / 8 16-byte chunks a
// row), as RmsNorm's bf16 output when src.norm_weight is set. Threads tid in [0, kWarps * 32) take
// part; partial holds rows * kWarps floats of shared memory; sync() is a barrier over exactly
// those threads (called once, or twice with the norm). Each row's sum of squares: a thread's
// chunks in order, the warp's xor butterfly, then the warps' sums in warp order.
// A thread's chunks are i = tid + c * kThreads < k / 8: a loop, or with kChunks > 0 an
// unrolled one of kChunks steps (k / 8 <= kChunks * kThreads). weight(c, i, q): the norm
// weight of element 8 i + q (chunk c of the thread).
template <int kWarps, int kChunks, typename Staging, typename Sync, typename Weight>
__device__ __forceinline__ void StageRowsImpl(const StageSource& src, int rows, const Staging& out,
                                              int tid, float* partial, Sync sync, Weight weight) {
  constexpr int kThreads = kWarps * 32;
  const int warp = tid / 32, lane = tid % 32;
  const int64_t nv = src.k / 8;
  const bool norm = src.norm_weight != nullptr;
  auto for_chunks = [&](auto f) {  // f(c, i), in chunk order
    if constexpr (kChunks > 0) {
#pragma unroll
      for (int c = 0; c < kChunks; ++c)
        if (tid + int64_t(c) * kThreads < nv) f(c, tid + int64_t(c) * kThreads);
    } else {
      for (int64_t i = tid; i < nv; i += kThreads) f(0, i);
    }
  };
  for (int r = 0; r < rows; ++r) {
    float ss = 0.0f;
    const uint4* xr = reinterpret_cast<const uint4*>(src.x + r * src.ldx);
    for_chunks([&](int, int64_t i) {
      const uint4 v = xr[i];
      out.Put(r, i, v);
      if (norm) ss += SumSq8(v);
    });
    if (norm) {
      for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      if (lane == 0) partial[r * kWarps + warp] = ss;
    }
  }
  sync();
  if (!norm) return;
  for (int r = 0; r < rows; ++r) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += partial[r * kWarps + w];
    const float inv = InvRms(total, src.k, src.norm_eps);
    // Each thread rescales the chunks it staged above (same i): no barrier in between.
    for_chunks([&](int c, int64_t i) {
      uint4 v = out.Get(r, i);
      bf16* e = reinterpret_cast<bf16*>(&v);
#pragma unroll
      for (int q = 0; q < 8; ++q) e[q] = NormElement(ToF(e[q]), inv, weight(c, i, q));
      out.Put(r, i, v);
    });
  }
  sync();
}

// StageRowsImpl with the norm weights read from global memory (after the wait).
template <int kWarps, typename Sync>
__device__ __forceinline__ void StageRowsOf(const StageSource& src, int rows, uint4* staged, int64_t ld,
                                            int tid, float* partial, Sync sync) {
  StageRowsImpl<kWarps, 0>(src, rows, Bf16Staging{staged, ld}, tid, partial, sync, [&](int, int64_t i, int q) {
    return LoadNormWeight(src.norm_weight, src.norm_type, i * 8 + q);
  });
}

// The RMSNorm weights a staging thread scales (its chunks i = tid + c * kThreads, 8 elements
// each), loaded into registers before PdlWait: weights are constant within a step
// (common/pdl.cuh), and after the wait their load (often an HBM miss: the step streams far
// more than L2 holds) would sit on the critical path behind x's. Holds k <= 8 * kChunks *
// kThreads; `ok` is false (and nothing is loaded) otherwise.
template <int kThreads, int kChunks = 2>
struct NormWeightRegs {
  static constexpr int kMaxChunks = kChunks;
  float w[kChunks][8];
  bool ok = false;
  __device__ __forceinline__ void Load(const void* weight, WeightType type, int64_t k, int tid) {
    ok = weight != nullptr && k <= int64_t(8) * kChunks * kThreads;
    if (!ok) return;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int64_t i = tid + int64_t(c) * kThreads;
      if (i < k / 8)
#pragma unroll
        for (int q = 0; q < 8; ++q) w[c][q] = LoadNormWeight(weight, type, i * 8 + q);
    }
  }
};

// Stages rows row0 .. row0 + NB - 1 of x into `staged` ([NB][k / 8] 16-byte chunks), as
// RmsNorm's bf16 output when `norm` (a.norm_weight). Threads tid in [0, kWarps * 32) take
// part; sync() is a barrier over exactly those threads (called once, or twice with norm).
// nw: the norm's weights preloaded before PdlWait, used when norm and nw->ok (the same
// values, sums and roundings as the global loads).
// staging: a Bf16Staging (the default form below) or an F32Staging.
template <int NB, int kWarps, typename Staging, typename Sync>
__device__ __forceinline__ void StageRowsTo(const GemvArgs& a, int64_t row0, const Staging& staging,
                                            int tid, bool norm, Sync sync,
                                            const NormWeightRegs<kWarps * 32>* nw = nullptr) {
  __shared__ float partial[NB * kWarps];
  const StageSource src{a.x + row0 * a.ldx, a.ldx, a.k, norm ? a.norm_weight : nullptr,
                        a.norm_type, a.norm_eps};
  using Regs = NormWeightRegs<kWarps * 32>;
  if (norm && nw != nullptr && nw->ok)
    StageRowsImpl<kWarps, Regs::kMaxChunks>(src, NB, staging, tid, partial, sync,
                                            [&](int c, int64_t, int q) { return nw->w[c][q]; });
  else
    StageRowsImpl<kWarps, 0>(src, NB, staging, tid, partial, sync, [&](int, int64_t i, int q) {
      return LoadNormWeight(src.norm_weight, src.norm_type, i * 8 + q);
    });
}
template <int NB, int kWarps, typename Sync>
__device__ __forceinline__ void StageRows(const GemvArgs& a, int64_t row0, uint4* staged, int tid,
                                          bool norm, Sync sync,
                                          const NormWeightRegs<kWarps * 32>* nw = nullptr) {
  StageRowsTo<NB, kWarps>(a, row0, Bf16Staging{staged, a.k / 8}, tid, norm, sync, nw);
}

// The warp's epilogue for output feature j: reduces acc[q][r] (weight row q of the warp:
// j, or j + roff; activation row row0 + r) over the lanes and lane r < NB writes row0 + r:
// kSwiGlu: out = silu(bf16(gate)) * bf16(up) (+ bias on both); otherwise each existing
// row jj = j + q * roff < m gets bias, accumulate, bf16 or f32 output (GemvArgs).
// scale (optional, fp8 weights): weight row q's sum is multiplied by scale[q] before the bias.
template <int NB, int kW, bool kSwiGlu>
__device__ __forceinline__ void WarpStore(const GemvArgs& a, int64_t row0, int64_t j, int64_t roff,
                                          float (&acc)[kW][NB], int lane,
                                          const float* scale = nullptr, bool use_prev = false,
                                          float prev = 0.0f) {
#pragma unroll
  for (int q = 0; q < kW; ++q)
#pragma unroll
    for (int r = 0; r < NB; ++r)
      for (int o = 16; o > 0; o >>= 1) acc[q][r] += __shfl_xor_sync(0xffffffffu, acc[q][r], o);
  if (lane >= NB) return;
  float v[kW];
#pragma unroll
  for (int q = 0; q < kW; ++q) {
    v[q] = 0.0f;
#pragma unroll
    for (int r = 0; r < NB; ++r)
      if (r == lane) v[q] = acc[q][r];
    if (scale) v[q] *= scale[q];
  }
  const int64_t row = row0 + lane;
  if constexpr (kSwiGlu) {
    if (a.bias) v[0] += a.bias[j], v[1] += a.bias[j + a.m];
    a.out[row * a.ldo + j] = SiluMul(ToF(ToB(v[0])), ToF(ToB(v[1])));
  } else {
#pragma unroll
    for (int q = 0; q < kW; ++q) {
      const int64_t jj = j + q * roff;
      if (q > 0 && jj >= a.m) break;
      float y = v[q];
      if (a.bias) y += a.bias[jj];
      // use_prev (NB == kW == 1, accumulate): prev is the output's value, loaded earlier by
      // this warp (a value, not a pointer: a pointer to it would put it in local memory).
      if (a.out_f32) {
        float* o = a.out_f32 + row * a.ldo + jj;
        *o = a.accumulate ? y + (use_prev ? prev : *o) : y;
      } else {
        bf16* o = a.out + row * a.ldo + jj;
        *o = ToB(a.accumulate ? y + (use_prev ? prev : ToF(*o)) : y);
      }
    }
  }
}

}  // namespace pg::cuda::gemv
