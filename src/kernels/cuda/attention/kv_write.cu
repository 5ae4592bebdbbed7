// KV-cache writes: KvWrite (k, v rows into their paged slots) and the fused RoPE + KV write
// (ops::RopeKvWrite: rotate q and k in place, then write k and v), for bf16 and fp8 e4m3
// caches (kv_types.cuh: stored = value / scale, saturated).
//
// Both kernels are launched with PDL (common/pdl.cuh) and wait before touching anything.
// The fused kernel optionally RMS-normalises each q and k head first (Qwen3 q/k norm).
//
// One block per new token. The slot of token row t: sequence s = token_seq[t], position
// kv_len[s] - q_len[s] + (t - q_start[s]), page page_table[page_start[s] + pos / page_size].
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/attention/kv_types.cuh"
#include "kernels/cuda/common/device_params.h"
#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/common/rope_device.cuh"

namespace pg::cuda {
namespace {

constexpr int kThreads = 128;

// Element offset of token row t's slot (kv head 0, element 0) in the cache.
__device__ __forceinline__ int64_t SlotOffset(const KvWriteArgs& a, int t) {
  const DeviceBatchView& b = a.batch;
  const int s = b.token_seq[t];
  const int tok = b.kv_len[s] - b.q_len[s] + (t - b.q_start[s]);
  const int64_t page = b.page_table[b.page_start[s] + tok / b.page_size];
  return (page * b.page_size + tok % b.page_size) * int64_t(a.kv_heads) * a.head_dim;
}

template <typename KvT>
__device__ __forceinline__ void Store(void* cache, int64_t i, float v) {
  static_cast<KvT*>(cache)[i] = kv::Traits<KvT>::From(v);
}

template <typename KvT>
__global__ void KvWriteKernel(const KvWriteArgs a) {
  PdlTrigger();
  PdlWait();  // k, v are the previous kernels' outputs
  const int t = blockIdx.x;
  const int n = a.kv_heads * a.head_dim;
  const int64_t dst = SlotOffset(a, t);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    Store<KvT>(a.k_cache, dst + i, __bfloat162float(a.k[int64_t(t) * a.k_stride + i]) * a.inv_k_scale);
    Store<KvT>(a.v_cache, dst + i, __bfloat162float(a.v[int64_t(t) * a.v_stride + i]) * a.inv_v_scale);
  }
}

// Rotated values are rounded to bf16 (as the separate Rope kernel stores them) before the
// cache conversion, so the fused op writes exactly what Rope + KvWrite would.
// Element i of a norm weight vector as f32.
__device__ __forceinline__ float NormWeight(const void* w, WeightType type, int i) {
  switch (type) {
    case WeightType::kBF16: return __bfloat162float(static_cast<const bf16*>(w)[i]);
    case WeightType::kF16: return __half2float(static_cast<const __half*>(w)[i]);
    default: return static_cast<const float*>(w)[i];
  }
}

// RMSNorm of each of token row t's q heads and k heads in place (warp per head; a lane
// rewrites only the elements it read). As the RmsNorm kernel: sum of squares of the bf16
// values in f32, out = bf16(x * rsqrt(mean + eps) * weight).
__device__ __forceinline__ void NormHeads(const RopeKvWriteArgs& a, bf16* qrow, bf16* krow) {
  const int d = a.kv.head_dim, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int r = threadIdx.x / 32; r < a.heads + a.kv.kv_heads; r += warps) {
    const bool is_q = r < a.heads;
    bf16* x = is_q ? qrow + int64_t(r) * d : krow + int64_t(r - a.heads) * d;
    const void* wt = is_q ? a.q_norm : a.k_norm;
    float ss = 0.0f;
    for (int e = lane; e < d; e += 32) {
      const float v = __bfloat162float(x[e]);
      ss += v * v;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = rsqrtf(ss / float(d) + a.norm_eps);
    for (int e = lane; e < d; e += 32)
      x[e] = __float2bfloat16_rn(__bfloat162float(x[e]) * inv * NormWeight(wt, a.norm_type, e));
  }
}

template <typename KvT>
__global__ void RopeKvWriteKernel(const __grid_constant__ RopeKvWriteArgs a) {
  PdlTrigger();
  PdlWait();  // q, k, v (and positions) are the previous kernels' outputs
  const int t = blockIdx.x;
  const KvWriteArgs& w = a.kv;
  const float pos = float(a.positions[t]);
  const int d = w.head_dim, half = a.rotary_dim / 2;
  // Each pair's rotation, once for all heads: (cos, sin) = rotation of (1, 0) by RopeRotate.
  __shared__ float cs[2 * kMaxRopePairs];
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float c = 1.0f, s = 0.0f;
    RopeRotate(c, s, a.inv_freq[i], pos);
    cs[2 * i] = c, cs[2 * i + 1] = s;
  }
  bf16* qrow = a.q + int64_t(t) * a.q_stride;
  bf16* krow = const_cast<bf16*>(w.k) + int64_t(t) * w.k_stride;  // rotated in place
  if (a.q_norm != nullptr) NormHeads(a, qrow, krow);
  __syncthreads();  // cs, and the normalised heads (global, written by other warps)
  auto rotate = [&](float& x0, float& x1, int i) {
    const float c = cs[2 * i], s = cs[2 * i + 1];
    const float r0 = x0 * c - x1 * s, r1 = x1 * c + x0 * s;
    x0 = r0, x1 = r1;
  };
  for (int idx = threadIdx.x; idx < a.heads * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    int i0, i1;
    RopePairIndex(a.neox, i, half, i0, i1);
    bf16* x = qrow + int64_t(h) * d;
    float x0 = __bfloat162float(x[i0]), x1 = __bfloat162float(x[i1]);
    rotate(x0, x1, i);
    x[i0] = __float2bfloat16_rn(x0);
    x[i1] = __float2bfloat16_rn(x1);
  }
  const int64_t dst = SlotOffset(w, t);
  for (int idx = threadIdx.x; idx < w.kv_heads * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    int i0, i1;
    RopePairIndex(a.neox, i, half, i0, i1);
    bf16* x = krow + int64_t(h) * d;
    float x0 = __bfloat162float(x[i0]), x1 = __bfloat162float(x[i1]);
    rotate(x0, x1, i);
    const bf16 b0 = __float2bfloat16_rn(x0), b1 = __float2bfloat16_rn(x1);
    x[i0] = b0, x[i1] = b1;
    Store<KvT>(w.k_cache, dst + int64_t(h) * d + i0, __bfloat162float(b0) * w.inv_k_scale);
    Store<KvT>(w.k_cache, dst + int64_t(h) * d + i1, __bfloat162float(b1) * w.inv_k_scale);
  }
  const int rest = d - a.rotary_dim;  // dims past rotary_dim are copied unrotated
  for (int idx = threadIdx.x; idx < w.kv_heads * rest; idx += blockDim.x) {
    const int64_t e = int64_t(idx / rest) * d + a.rotary_dim + idx % rest;
    Store<KvT>(w.k_cache, dst + e, __bfloat162float(krow[e]) * w.inv_k_scale);
  }
  const bf16* vrow = w.v + int64_t(t) * w.v_stride;
  for (int i = threadIdx.x; i < w.kv_heads * d; i += blockDim.x)
    Store<KvT>(w.v_cache, dst + i, __bfloat162float(vrow[i]) * w.inv_v_scale);
}

}  // namespace

void LaunchKvWrite(const KvWriteArgs& a, cudaStream_t stream) {
  if (a.batch.num_tokens == 0) return;
  const dim3 grid(unsigned(a.batch.num_tokens));
  if (a.kv_type == KvType::kBF16) LaunchPdl(KvWriteKernel<bf16>, grid, dim3(kThreads), 0, stream, a);
  else LaunchPdl(KvWriteKernel<kv::fp8>, grid, dim3(kThreads), 0, stream, a);
}

void LaunchRopeKvWrite(const RopeKvWriteArgs& a, cudaStream_t stream) {
  if (a.kv.batch.num_tokens == 0) return;
  const dim3 grid(unsigned(a.kv.batch.num_tokens));
  if (a.kv.kv_type == KvType::kBF16)
    LaunchPdl(RopeKvWriteKernel<bf16>, grid, dim3(kThreads), 0, stream, a);
  else
    LaunchPdl(RopeKvWriteKernel<kv::fp8>, grid, dim3(kThreads), 0, stream, a);
}

}  // namespace pg::cuda
