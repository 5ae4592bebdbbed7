// Paged attention over a bf16 or fp8 e4m3 KV cache (layout of ops.h: [pages, page_size,
// kv_heads, dim]; fp8 read element by element):
// the general kernel for batches with multi-token rows (decode-only batches go to
// decode_attention.cu; the KV write is in kv_write.cu).
//
// One kernel serves decode and prefill (correctness first): a block owns one query row, one
// kv head with all of its `group` query heads packed (GQA: the K/V rows are read once for the
// whole group), and one split of the row's causal key range (flash-decoding / split-K). Its 4
// warps stream the split's keys in tiles of 8 tokens (8 rows in flight per warp) with an
// online softmax; the warps merge in shared memory. With num_splits > 1 each split writes an
// unnormalised partial (acc, max, sum) and CombineKernel merges the splits.
//
// Prefill re-reads a sequence's keys once per query row (no query tiling yet): correct for
// any batch, but far from the FLOP floor for long prompts; a tensor-core tiled prefill kernel
// is the next step (docs/PERF.md).
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/cuda/attention/kv_types.cuh"
#include "kernels/cuda/common/device_params.h"
#include "kernels/cuda/common/warp_reduce.cuh"

namespace pg::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kTile = 8;  // key tokens per warp iteration

// Loads the lane's EPL consecutive elements [lane*EPL, lane*EPL + EPL) of a bf16 row of D
// (elements past D read as 0).
template <int D, int EPL>
__device__ __forceinline__ void LoadRow(const bf16* row, int lane, float (&v)[EPL]) {
  const int e0 = lane * EPL;
  if constexpr (EPL == 2 && D == 64) {
    const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(row + e0));
    v[0] = f.x, v[1] = f.y;
  } else if constexpr (EPL == 4 && D == 128) {
    const uint2 u = *reinterpret_cast<const uint2*>(row + e0);
    const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&u);
    const float2 a = __bfloat1622float2(p[0]), b = __bfloat1622float2(p[1]);
    v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
  } else if constexpr (EPL == 8 && D == 256) {
    const uint4 u = *reinterpret_cast<const uint4*>(row + e0);
    const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float2 f = __bfloat1622float2(p[q]);
      v[2 * q] = f.x, v[2 * q + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < EPL; ++i) v[i] = e0 + i < D ? __bfloat162float(row[e0 + i]) : 0.0f;
  }
}

// The same from an fp8 e4m3 row (stored values; the caller applies the scales).
template <int D, int EPL>
__device__ __forceinline__ void LoadRow(const kv::fp8* row, int lane, float (&v)[EPL]) {
  const int e0 = lane * EPL;
#pragma unroll
  for (int i = 0; i < EPL; ++i) v[i] = e0 + i < D ? float(row[e0 + i]) : 0.0f;
}

// G: compiled group size (>= the real group; heads past it are masked).
template <int D, int G, typename KvT>
__global__ void __launch_bounds__(kWarps * 32) AttentionKernel(const AttentionArgs a) {
  constexpr int EPL = (D + 31) / 32;
  const int t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = a.heads / a.kv_heads;
  const DeviceBatchView& b = a.batch;

  const int s = b.token_seq[t];
  const int q_len = b.q_len[s], kv_len = b.kv_len[s];
  if (a.prefill_min_q_len > 0 && q_len >= a.prefill_min_q_len) return;  // the prefill kernel's row
  if (a.decode_rows_done && q_len == 1) return;  // the decode kernel's row
  const int pos = kv_len - q_len + (t - b.q_start[s]);  // this row attends to [lo, pos]
  const int lo = a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0;
  const int begin = lo + split * a.chunk;
  const int end = min(pos + 1, begin + a.chunk);
  const int32_t* pages = b.page_table + b.page_start[s];
  const KvT* k_cache = static_cast<const KvT*>(a.k_cache);  // bf16 or fp8 e4m3
  const KvT* v_cache = static_cast<const KvT*>(a.v_cache);

  float q[G][EPL];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g < group) {
      LoadRow<D, EPL>(a.q + int64_t(t) * a.q_stride + int64_t(kvh * group + g) * D, lane, q[g]);
#pragma unroll
      for (int i = 0; i < EPL; ++i) q[g][i] *= a.logit_scale;
    } else {
#pragma unroll
      for (int i = 0; i < EPL; ++i) q[g][i] = 0.0f;
    }
  }
  float m[G], l[G], acc[G][EPL];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY, l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < EPL; ++i) acc[g][i] = 0.0f;
  }

  const int64_t slot_stride = int64_t(a.kv_heads) * D;  // elements between token slots
  for (int tb = begin + warp * kTile; tb < end; tb += kWarps * kTile) {
    float kv[kTile][EPL];
    int64_t off[kTile];
#pragma unroll
    for (int u = 0; u < kTile; ++u) {
      const int tok = min(tb + u, end - 1);  // clamp: masked below
      off[u] = (int64_t(pages[tok / b.page_size]) * b.page_size + tok % b.page_size) * slot_stride +
               int64_t(kvh) * D;
      LoadRow<D, EPL>(k_cache + off[u], lane, kv[u]);
    }
    float logit[kTile][G];
#pragma unroll
    for (int u = 0; u < kTile; ++u)
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < EPL; ++i) dot = fmaf(q[g][i], kv[u][i], dot);
        dot = WarpSum(dot);
        if (a.softcap > 0.0f) dot = a.softcap * tanhf(dot / a.softcap);
        logit[u][g] = tb + u < end ? dot : -INFINITY;
      }
#pragma unroll
    for (int u = 0; u < kTile; ++u) LoadRow<D, EPL>(v_cache + off[u], lane, kv[u]);
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float mx = m[g];
#pragma unroll
      for (int u = 0; u < kTile; ++u) mx = fmaxf(mx, logit[u][g]);  // finite: tile has >= 1 token
      const float corr = __expf(m[g] - mx);  // m = -inf -> 0
      l[g] *= corr;
#pragma unroll
      for (int i = 0; i < EPL; ++i) acc[g][i] *= corr;
#pragma unroll
      for (int u = 0; u < kTile; ++u) {
        const float p = __expf(logit[u][g] - mx);
        l[g] += p;
#pragma unroll
        for (int i = 0; i < EPL; ++i) acc[g][i] = fmaf(p, kv[u][i], acc[g][i]);
      }
      m[g] = mx;
    }
  }

  // Merge the warps: [warp][g] max and sum, [warp][g][D] accumulators.
  __shared__ float sm_m[kWarps][G], sm_l[kWarps][G];
  __shared__ float sm_acc[kWarps][G][EPL * 32];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (lane == 0) sm_m[warp][g] = m[g], sm_l[warp][g] = l[g];
#pragma unroll
    for (int i = 0; i < EPL; ++i) sm_acc[warp][g][lane * EPL + i] = acc[g][i];
  }
  __syncthreads();
  const int num_out = group * D;
  for (int idx = threadIdx.x; idx < num_out; idx += blockDim.x) {
    const int g = idx / D, e = idx % D;
    float mx = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, sm_m[w][g]);
    float sum = 0.0f, val = 0.0f;
    if (mx != -INFINITY) {
      for (int w = 0; w < kWarps; ++w) {
        const float c = __expf(sm_m[w][g] - mx);
        sum += sm_l[w][g] * c;
        val += sm_acc[w][g][e] * c;
      }
    }
    const int h = kvh * group + g;
    if (a.num_splits == 1) {
      a.out[int64_t(t) * a.out_stride + int64_t(h) * D + e] =
          __float2bfloat16_rn(sum > 0.0f ? val / sum * a.v_scale : 0.0f);
    } else {
      const int64_t base = (int64_t(t) * a.heads + h) * a.num_splits + split;
      a.partial_acc[base * D + e] = val;
      if (e == 0) a.partial_ml[2 * base] = mx, a.partial_ml[2 * base + 1] = sum;
    }
  }
}

// Merges the splits of one (row, head): threads over head_dim.
__global__ void CombineKernel(const AttentionArgs a) {
  const int t = blockIdx.x, h = blockIdx.y, D = a.head_dim;
  if (a.prefill_min_q_len > 0 && a.batch.q_len[a.batch.token_seq[t]] >= a.prefill_min_q_len) return;
  if (a.decode_rows_done && a.batch.q_len[a.batch.token_seq[t]] == 1) return;
  const int64_t base = (int64_t(t) * a.heads + h) * a.num_splits;
  float mx = -INFINITY;
  for (int i = 0; i < a.num_splits; ++i) mx = fmaxf(mx, a.partial_ml[2 * (base + i)]);
  for (int e = threadIdx.x; e < D; e += blockDim.x) {
    float sum = 0.0f, val = 0.0f;
    for (int i = 0; i < a.num_splits; ++i) {
      const float mi = a.partial_ml[2 * (base + i)];
      if (mi == -INFINITY) continue;
      const float c = __expf(mi - mx);
      sum += a.partial_ml[2 * (base + i) + 1] * c;
      val += a.partial_acc[(base + i) * D + e] * c;
    }
    a.out[int64_t(t) * a.out_stride + int64_t(h) * D + e] =
        __float2bfloat16_rn(sum > 0.0f ? val / sum * a.v_scale : 0.0f);
  }
}

template <int D, typename KvT>
void LaunchForType(const AttentionArgs& a, dim3 grid, cudaStream_t stream) {
  const int group = a.heads / a.kv_heads;
  if (group <= 1) AttentionKernel<D, 1, KvT><<<grid, kWarps * 32, 0, stream>>>(a);
  else if (group <= 2) AttentionKernel<D, 2, KvT><<<grid, kWarps * 32, 0, stream>>>(a);
  else if (group <= 4) AttentionKernel<D, 4, KvT><<<grid, kWarps * 32, 0, stream>>>(a);
  else AttentionKernel<D, 8, KvT><<<grid, kWarps * 32, 0, stream>>>(a);
}

template <int D>
void LaunchForDim(const AttentionArgs& a, dim3 grid, cudaStream_t stream) {
  if (a.kv_type == KvType::kF8E4M3) LaunchForType<D, kv::fp8>(a, grid, stream);
  else LaunchForType<D, bf16>(a, grid, stream);
}

}  // namespace

bool AttentionSupportsHeadDim(int d) {
  return d == 32 || d == 40 || d == 64 || d == 80 || d == 96 || d == 128 || d == 256; }

void LaunchAttention(const AttentionArgs& a, cudaStream_t stream) {
  if (a.batch.num_tokens == 0) return;
  dim3 grid(unsigned(a.batch.num_tokens), unsigned(a.kv_heads), unsigned(a.num_splits));
  switch (a.head_dim) {
    case 32: LaunchForDim<32>(a, grid, stream); break;  // tiny test models (tests/data/models)
    case 40: LaunchForDim<40>(a, grid, stream); break;
    case 64: LaunchForDim<64>(a, grid, stream); break;
    case 80: LaunchForDim<80>(a, grid, stream); break;
    case 96: LaunchForDim<96>(a, grid, stream); break;
    case 128: LaunchForDim<128>(a, grid, stream); break;
    case 256: LaunchForDim<256>(a, grid, stream); break;
    default: return;  // launcher checked AttentionSupportsHeadDim
  }
  if (a.num_splits > 1)
    CombineKernel<<<dim3(unsigned(a.batch.num_tokens), unsigned(a.heads)), 128, 0, stream>>>(a);
}

}  // namespace pg::cuda
