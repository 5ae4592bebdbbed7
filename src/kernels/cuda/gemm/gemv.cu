// Small-batch bf16 GEMV: out[r, j] = sum_i x[r, i] * w[j, i] for up to 8 rows r per pass.
// One warp per output feature j; weights are streamed once per pass (16-byte loads, four in
// flight per lane), activations come from L1/L2. Used for decode batches (memory bound) and
// as the always-correct fallback of Matmul (any strides, any n: passes of 8 rows). Writes bf16,
// or f32 (out_f32: outputs whose rounding matters, e.g. MoE router logits).
#include <cuda_bf16.h>

#include "kernels/cuda/common/device_params.h"

namespace pg::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kUnroll = 4;

__device__ __forceinline__ void Dot8(const uint4& wv, const uint4& xv, float& acc) {
  const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&wv);
  const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&xv);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float2 wf = __bfloat1622float2(w2[q]);
    const float2 xf = __bfloat1622float2(x2[q]);
    acc = fmaf(wf.x, xf.x, acc);
    acc = fmaf(wf.y, xf.y, acc);
  }
}

// kVec: k % 8 == 0, ldx % 8 == 0, ldw % 8 == 0 and 16-byte aligned bases.
template <int NB, bool kVec>
__global__ void __launch_bounds__(kWarps * 32) GemvKernel(GemvArgs a, int64_t row0) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t j = int64_t(blockIdx.x) * kWarps + warp;
  if (j >= a.m) return;
  const bf16* w = a.w + j * a.ldw;
  const bf16* x = a.x + row0 * a.ldx;
  float acc[NB];
#pragma unroll
  for (int r = 0; r < NB; ++r) acc[r] = 0.0f;
  if constexpr (kVec) {
    const int64_t nv = a.k / 8;  // 16-byte chunks per row
    const uint4* w4 = reinterpret_cast<const uint4*>(w);
    int64_t c = lane;
    for (; c + 32 * (kUnroll - 1) < nv; c += 32 * kUnroll) {
      uint4 wv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) wv[u] = __ldcs(w4 + c + 32 * u);  // streamed once
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int r = 0; r < NB; ++r)
          Dot8(wv[u], __ldg(reinterpret_cast<const uint4*>(x + r * a.ldx) + c + 32 * u), acc[r]);
    }
    for (; c < nv; c += 32) {
      const uint4 wv = __ldcs(w4 + c);
#pragma unroll
      for (int r = 0; r < NB; ++r)
        Dot8(wv, __ldg(reinterpret_cast<const uint4*>(x + r * a.ldx) + c), acc[r]);
    }
  } else {
    for (int64_t i = lane; i < a.k; i += 32) {
      const float wf = __bfloat162float(w[i]);
#pragma unroll
      for (int r = 0; r < NB; ++r) acc[r] = fmaf(__bfloat162float(x[r * a.ldx + i]), wf, acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < NB; ++r)
    for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
  if (lane < NB) {
    float v = 0.0f;
#pragma unroll
    for (int r = 0; r < NB; ++r)
      if (r == lane) v = acc[r];
    if (a.bias) v += a.bias[j];
    if (a.out_f32) {
      float* o = a.out_f32 + (row0 + lane) * a.ldo + j;
      if (a.accumulate) v += *o;
      *o = v;
    } else {
      bf16* o = a.out + (row0 + lane) * a.ldo + j;
      if (a.accumulate) v += __bfloat162float(*o);
      *o = __float2bfloat16_rn(v);
    }
  }
}

template <bool kVec>
void LaunchPass(const GemvArgs& a, int64_t row0, int nb, cudaStream_t stream) {
  const unsigned blocks = unsigned((a.m + kWarps - 1) / kWarps);
  const int threads = kWarps * 32;
  switch (nb) {
#define PG_GEMV_CASE(N) \
  case N: GemvKernel<N, kVec><<<blocks, threads, 0, stream>>>(a, row0); break;
    PG_GEMV_CASE(1) PG_GEMV_CASE(2) PG_GEMV_CASE(3) PG_GEMV_CASE(4)
    PG_GEMV_CASE(5) PG_GEMV_CASE(6) PG_GEMV_CASE(7) PG_GEMV_CASE(8)
#undef PG_GEMV_CASE
    default: break;
  }
}

}  // namespace

void LaunchGemv(const GemvArgs& a, cudaStream_t stream) {
  if (a.n == 0 || a.m == 0) return;
  const bool vec = a.k % 8 == 0 && a.ldx % 8 == 0 && a.ldw % 8 == 0 &&
                   ((reinterpret_cast<uintptr_t>(a.x) | reinterpret_cast<uintptr_t>(a.w)) & 15) == 0;
  for (int64_t row0 = 0; row0 < a.n; row0 += 8) {
    const int nb = int(a.n - row0 < 8 ? a.n - row0 : 8);
    if (vec) LaunchPass<true>(a, row0, nb, stream);
    else LaunchPass<false>(a, row0, nb, stream);
  }
}

}  // namespace pg::cuda
