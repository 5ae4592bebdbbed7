// Latent cache write (bf16 / fp8 e4m3) and the history gather of the expanded (prefill) path.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/mla/mla_params.h"

namespace pg::cuda {
namespace {

__device__ __forceinline__ float Fp8ToFloat(uint8_t v) {
  __nv_fp8_e4m3 f;
  f.__x = v;
  return float(f);
}

// One block per new token; threads stride over its latent row.
__global__ void MlaCacheWriteKernel(const MlaCacheWriteArgs a) {
  const int t = blockIdx.x;
  const DeviceBatchView& b = a.batch;
  const int s = b.token_seq[t];
  const int pos = b.kv_len[s] - b.q_len[s] + (t - b.q_start[s]);
  const int page = b.page_table[b.page_start[s] + pos / b.page_size];
  const int64_t slot = (int64_t(page) * b.page_size + pos % b.page_size) * a.half;
  const bf16* src = a.latent + int64_t(t) * a.latent_stride;
  for (int e = threadIdx.x; e < a.latent_dim; e += blockDim.x) {
    const float v = __bfloat162float(src[e]);
    const bool k_half = e < a.half;
    const int64_t off = slot + (k_half ? e : e - a.half);
    void* base = k_half ? a.k_cache : a.v_cache;
    if (a.cache_type == MlaCacheType::kFP8) {
      const __nv_fp8_e4m3 f(v * (k_half ? a.inv_k_scale : a.inv_v_scale));  // saturating
      static_cast<uint8_t*>(base)[off] = f.__x;
    } else {
      static_cast<bf16*>(base)[off] = __float2bfloat16_rn(v * (k_half ? a.inv_k_scale : a.inv_v_scale));
    }
  }
}

// grid (ceil(max_kv_len / kTokens), num_seqs): kTokens history rows per block.
constexpr int kGatherTokens = 4;
__global__ void MlaGatherKernel(const MlaGatherArgs a) {
  const int s = blockIdx.y;
  const DeviceBatchView& b = a.batch;
  const int kv_len = b.kv_len[s];
  for (int i = 0; i < kGatherTokens; ++i) {
    const int t = blockIdx.x * kGatherTokens + i;
    if (t >= kv_len) return;
    const int page = b.page_table[b.page_start[s] + t / b.page_size];
    const int64_t slot = (int64_t(page) * b.page_size + t % b.page_size) * kMlaHalf;
    bf16* dst = a.out + int64_t(a.hist_start[s] + t) * kMlaLatent;
    for (int e = threadIdx.x; e < kMlaLatent; e += blockDim.x) {
      const bool k_half = e < kMlaHalf;
      const int64_t off = slot + (k_half ? e : e - kMlaHalf);
      const void* base = k_half ? a.k_cache : a.v_cache;
      if (a.cache_type == MlaCacheType::kFP8)
        dst[e] = __float2bfloat16_rn(Fp8ToFloat(static_cast<const uint8_t*>(base)[off]) *
                                     (k_half ? a.k_scale : a.v_scale));
      else
        dst[e] = __float2bfloat16_rn(__bfloat162float(static_cast<const bf16*>(base)[off]) *
                                     (k_half ? a.k_scale : a.v_scale));
    }
  }
}

// hist_start[s] = sum of kv_len[0..s) (one thread: num_seqs is small).
__global__ void MlaHistStartKernel(const DeviceBatchView b, int32_t* hist_start) {
  int32_t acc = 0;
  for (int s = 0; s < b.num_seqs; ++s) {
    hist_start[s] = acc;
    acc += b.kv_len[s];
  }
}

}  // namespace

void LaunchMlaHistStart(const DeviceBatchView& b, int32_t* hist_start, cudaStream_t stream) {
  if (b.num_seqs > 0) MlaHistStartKernel<<<1, 1, 0, stream>>>(b, hist_start);
}

void LaunchMlaCacheWrite(const MlaCacheWriteArgs& a, cudaStream_t stream) {
  if (a.batch.num_tokens == 0) return;
  MlaCacheWriteKernel<<<a.batch.num_tokens, 128, 0, stream>>>(a);
}

void LaunchMlaGather(const MlaGatherArgs& a, cudaStream_t stream) {
  if (a.max_kv_len == 0 || a.batch.num_seqs == 0) return;
  const dim3 grid((a.max_kv_len + kGatherTokens - 1) / kGatherTokens, a.batch.num_seqs);
  MlaGatherKernel<<<grid, 96, 0, stream>>>(a);
}

}  // namespace pg::cuda
