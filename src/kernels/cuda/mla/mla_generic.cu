// Shape-generic MLA kernels (correctness path for latent shapes without a compiled tensor-core
// kernel, e.g. the tiny golden-test models): absorbed attention in f32 scalar math, and the
// per-head W_UK / W_UV products for shapes cuBLASLt refuses.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/mla/mla_params.h"

namespace pg::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float LoadLatent(const MlaGenericArgs& a, int64_t slot, int e) {
  const bool k_half = e < a.half;
  const int64_t off = slot * a.half + (k_half ? e : e - a.half);
  const void* base = k_half ? a.k_cache : a.v_cache;
  float v;
  if (a.cache_type == MlaCacheType::kFP8) {
    __nv_fp8_e4m3 f;
    f.__x = static_cast<const uint8_t*>(base)[off];
    v = float(f);
  } else {
    v = __bfloat162float(static_cast<const bf16*>(base)[off]);
  }
  return v * (k_half ? a.k_scale : a.v_scale);
}

// One block per (query row, head). Warp w takes keys w, w + 4, ...; each warp keeps its own
// online softmax (m, l) and output row in shared memory; the warps merge at the end.
// Dynamic shared memory: q [rank + rope] + o [kWarps][rank] floats.
__global__ void __launch_bounds__(kThreads) MlaGenericKernel(const MlaGenericArgs a) {
  extern __shared__ float sh[];
  const int L = a.rank + a.rope;
  float* q = sh;
  float* o = sh + L;
  __shared__ float wm[kWarps], wl[kWarps];
  const int64_t row = blockIdx.x;  // token * heads + head
  const int t = int(row / a.heads);
  const DeviceBatchView& b = a.batch;
  const int s = b.token_seq[t];
  const int pos = b.kv_len[s] - b.q_len[s] + (t - b.q_start[s]);
  const int32_t* pages = b.page_table + b.page_start[s];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int e = threadIdx.x; e < L; e += kThreads) q[e] = __bfloat162float(a.q_lat[row * L + e]);
  for (int e = threadIdx.x; e < kWarps * a.rank; e += kThreads) o[e] = 0.0f;
  __syncthreads();
  float m = -1e30f, l = 0.0f;
  float* ow = o + warp * a.rank;
  for (int key = warp; key <= pos; key += kWarps) {
    const int64_t slot = int64_t(pages[key / b.page_size]) * b.page_size + key % b.page_size;
    float dot = 0.0f;
    for (int e = lane; e < L; e += 32) dot += q[e] * LoadLatent(a, slot, e);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    const float sc = dot * a.logit_scale_log2;
    const float mn = fmaxf(m, sc);
    const float alpha = exp2f(m - mn), p = exp2f(sc - mn);
    l = l * alpha + p;
    m = mn;
    for (int c = lane; c < a.rank; c += 32) ow[c] = ow[c] * alpha + p * LoadLatent(a, slot, c);
  }
  if (lane == 0) wm[warp] = m, wl[warp] = l;
  __syncthreads();
  float mx = -1e30f;
  for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, wm[w]);
  float total = 0.0f;
  for (int w = 0; w < kWarps; ++w) total += wl[w] * exp2f(wm[w] - mx);
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  for (int c = threadIdx.x; c < a.rank; c += kThreads) {
    float acc = 0.0f;
    for (int w = 0; w < kWarps; ++w) acc += o[w * a.rank + c] * exp2f(wm[w] - mx);
    a.o_lat[row * a.rank + c] = __float2bfloat16_rn(acc * inv);
  }
}

// One block per (token, head); threads over the m outputs.
__global__ void __launch_bounds__(kThreads) MlaHeadGemmKernel(const MlaHeadGemmArgs a) {
  const int64_t t = blockIdx.x / a.heads, h = blockIdx.x % a.heads;
  const bf16* x = a.x + t * a.ldx + h * a.x_head;
  const bf16* w = a.w + h * a.w_head;
  bf16* out = a.out + t * a.ldo + h * a.o_head;
  for (int64_t j = threadIdx.x; j < a.m; j += kThreads) {
    float acc = 0.0f;
    for (int64_t i = 0; i < a.k; ++i)
      acc += __bfloat162float(x[i]) * __bfloat162float(a.w_km ? w[i * a.ldw + j] : w[j * a.ldw + i]);
    out[j] = __float2bfloat16_rn(acc);
  }
}

}  // namespace

void LaunchMlaGeneric(const MlaGenericArgs& a, cudaStream_t stream) {
  const int64_t rows = int64_t(a.batch.num_tokens) * a.heads;
  if (rows == 0) return;
  const size_t smem = size_t(a.rank + a.rope + kWarps * a.rank) * sizeof(float);
  if (smem > 48 * 1024)
    cudaFuncSetAttribute(MlaGenericKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  MlaGenericKernel<<<unsigned(rows), kThreads, smem, stream>>>(a);
}

void LaunchMlaHeadGemm(const MlaHeadGemmArgs& a, cudaStream_t stream) {
  const int64_t blocks = a.tokens * a.heads;
  if (blocks == 0) return;
  MlaHeadGemmKernel<<<unsigned(blocks), kThreads, 0, stream>>>(a);
}

}  // namespace pg::cuda
