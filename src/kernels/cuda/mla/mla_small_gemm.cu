// The absorbed path's per-head products for a few query rows (decode: tokens <= 8), where
// cuBLASLt's batched GEMM runs far from the weight-streaming floor. Memory bound: each block
// streams a slice of one head's W_UK / W_UV once for all its rows (16-byte loads).
#include <cuda_bf16.h>

#include "kernels/cuda/mla/mla_params.h"

namespace pg::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ void Unpack8(const uint4& u, float (&f)[8]) {
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __bfloat1622float2(p[i]);
    f[2 * i] = v.x, f[2 * i + 1] = v.y;
  }
}

// q_lat[t, h, c] = sum_d q[t, h, d] * W_UK_h[d, c]. Block (h, 256-column slice); warp w sums
// rows d = w, w + 8, ...; lane owns 8 columns; the warps' sums meet in shared memory.
template <int T>
__global__ void __launch_bounds__(kThreads) FoldKernel(const MlaSmallGemmArgs a) {
  __shared__ float qs[T][kMaxSmallNope];
  __shared__ float red[kWarps][256];
  const int h = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < T * a.k; i += kThreads) {
    const int t = i / a.k, d = i % a.k;
    qs[t][d] = __bfloat162float(a.x[int64_t(t) * a.ldx + int64_t(h) * a.x_head + d]);
  }
  __syncthreads();
  const int c0 = blockIdx.y * 256 + lane * 8;
  const bool ok = c0 < a.m;
  float acc[T][8];
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[t][i] = 0.0f;
  const bf16* w = a.w + int64_t(h) * a.w_head + c0;
  if (ok) {
#pragma unroll 4
    for (int d = warp; d < a.k; d += kWarps) {
      float f[8];
      Unpack8(*reinterpret_cast<const uint4*>(w + int64_t(d) * a.ldw), f);
#pragma unroll
      for (int t = 0; t < T; ++t)
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[t][i] += qs[t][d] * f[i];
    }
  }
  for (int t = 0; t < T; ++t) {
#pragma unroll
    for (int i = 0; i < 8; ++i) red[warp][lane * 8 + i] = acc[t][i];
    __syncthreads();
    const int c = blockIdx.y * 256 + threadIdx.x;
    if (c < a.m) {
      float sum = 0.0f;
#pragma unroll
      for (int w2 = 0; w2 < kWarps; ++w2) sum += red[w2][threadIdx.x];
      a.out[int64_t(t) * a.ldo + int64_t(h) * a.o_head + c] = __float2bfloat16_rn(sum);
    }
    __syncthreads();
  }
}

// out[t, h, j] = sum_c o[t, h, c] * W_UV_h[j, c]. Block (h, 16 rows j); warp w owns rows
// 2w, 2w + 1; lanes stride the 16-byte chunks of c; warp sums by shuffles.
template <int T>
__global__ void __launch_bounds__(kThreads) ApplyKernel(const MlaSmallGemmArgs a) {
  __shared__ float os[T][kMaxSmallRank];
  const int h = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < T * a.k; i += kThreads) {
    const int t = i / a.k, c = i % a.k;
    os[t][c] = __bfloat162float(a.x[int64_t(t) * a.ldx + int64_t(h) * a.x_head + c]);
  }
  __syncthreads();
  for (int r = 0; r < 2; ++r) {
    const int j = blockIdx.y * 16 + warp * 2 + r;
    if (j >= a.m) break;
    const bf16* w = a.w + int64_t(h) * a.w_head + int64_t(j) * a.ldw;
    float part[T];
#pragma unroll
    for (int t = 0; t < T; ++t) part[t] = 0.0f;
    for (int c = lane * 8; c < a.k; c += 32 * 8) {
      float f[8];
      Unpack8(*reinterpret_cast<const uint4*>(w + c), f);
#pragma unroll
      for (int t = 0; t < T; ++t)
#pragma unroll
        for (int i = 0; i < 8; ++i) part[t] += os[t][c + i] * f[i];
    }
#pragma unroll
    for (int t = 0; t < T; ++t) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) part[t] += __shfl_xor_sync(0xffffffffu, part[t], o);
    }
    if (lane == 0)
#pragma unroll
      for (int t = 0; t < T; ++t)
        a.out[int64_t(t) * a.ldo + int64_t(h) * a.o_head + j] = __float2bfloat16_rn(part[t]);
  }
}

}  // namespace

bool MlaSmallGemmSupports(int64_t tokens, int64_t k, int64_t m, bool fold) {
  if (tokens < 1 || tokens > kMaxSmallTokens || k % 8 != 0 || m % 8 != 0) return false;
  return fold ? k <= kMaxSmallNope : k <= kMaxSmallRank;
}

#define PG_MLA_SMALL_CASES(KERNEL)                                                     \
  switch (a.tokens) {                                                                  \
    case 1: KERNEL<1><<<grid, kThreads, 0, stream>>>(a); break;                        \
    case 2: KERNEL<2><<<grid, kThreads, 0, stream>>>(a); break;                        \
    case 3: KERNEL<3><<<grid, kThreads, 0, stream>>>(a); break;                        \
    case 4: KERNEL<4><<<grid, kThreads, 0, stream>>>(a); break;                        \
    case 5: KERNEL<5><<<grid, kThreads, 0, stream>>>(a); break;                        \
    case 6: KERNEL<6><<<grid, kThreads, 0, stream>>>(a); break;                        \
    case 7: KERNEL<7><<<grid, kThreads, 0, stream>>>(a); break;                        \
    default: KERNEL<8><<<grid, kThreads, 0, stream>>>(a); break;                       \
  }

void LaunchMlaFoldSmall(const MlaSmallGemmArgs& a, cudaStream_t stream) {
  const dim3 grid(unsigned(a.heads), unsigned((a.m + 255) / 256));
  PG_MLA_SMALL_CASES(FoldKernel)
}

void LaunchMlaApplySmall(const MlaSmallGemmArgs& a, cudaStream_t stream) {
  const dim3 grid(unsigned(a.heads), unsigned((a.m + 15) / 16));
  PG_MLA_SMALL_CASES(ApplyKernel)
}

}  // namespace pg::cuda
