// The attention step of the persistent decode kernel (mega_params.h kAttention): batch 1, one
// new token at position pos = kv_len - 1, bf16 paged KV, head_dim 128, GQA groups <= 4.
//
// Work: kv_heads x nsplit tasks (kv head g, key split), spread over the blocks; nsplit comes
// from kv_len on the device (>= kMegaMinSplitKeys keys a split, at most the blocks per kv head
// and the plan's max_splits), so one captured graph serves every context length. A task:
//  1. RoPE of its group's q heads and of k (each rounded to bf16, as RopeKvWrite); the task of
//     split 0 writes the rotated k and v into the token's cache slot. Position pos itself is
//     never read from the cache in this launch: the split that holds it takes k and v from
//     shared memory, so no block waits for the cache write;
//  2. consumer warp w takes keys p0 + w, p0 + w + 8, ...: lane l holds dims 4l..4l+3, one
//     256-byte coalesced row read per key for k and for v, q.k by xor butterfly, online softmax
//     in log2 units (as decode_common.cuh);
//  3. the warps merge in shared memory; one split writes out directly, else each split writes
//     its partial and the last split block of the kv head (arrival counter, reset by it)
//     merges them (read through L2) into out.
// Shared memory: the activation region of the kernel (>= 19 KB here), unused by this step.
#pragma once

#include <cuda_bf16.h>

#include "kernels/cuda/common/rope_device.cuh"
#include "kernels/cuda/mega/mega_params.h"
#include "kernels/cuda/mega/mega_sync.cuh"

namespace pg::cuda::mega {

constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float Exp2Or0(float x, float m) {  // 2^(x - m); 0 for an empty m
  return m == -INFINITY ? 0.0f : exp2f(x - m);
}

struct AttnSmem {
  float q[kMegaMaxGroup][kMegaHeadDim];  // rotated, bf16-rounded query heads of the group
  float k[kMegaHeadDim], v[kMegaHeadDim];  // the new token's (rotated) k and v
  float m[kMegaConsumerWarps][kMegaMaxGroup], l[kMegaConsumerWarps][kMegaMaxGroup];
  float acc[kMegaConsumerWarps][kMegaMaxGroup][kMegaHeadDim];
  int last;
};

// Element offset of position p's row (kv head 0) in a layer's cache.
__device__ __forceinline__ int64_t CacheRow(const DeviceBatchView& b, int p, int kv_heads) {
  const int64_t page = b.page_table[b.page_start[0] + p / b.page_size];
  return (page * b.page_size + p % b.page_size) * int64_t(kv_heads) * kMegaHeadDim;
}

__device__ __forceinline__ void Widen4(const uint2& u, float (&f)[4]) {
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&u);
  const float2 a = __bfloat1622float2(p[0]), b = __bfloat1622float2(p[1]);
  f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
}

// The split layout of an attention step for the current kv_len (same in every block).
struct AttnSplits {
  int pos, n, nsplit, chunk;
};
__device__ __forceinline__ AttnSplits SplitsOf(const MegaArgs& a, const MegaStep& s) {
  AttnSplits r;
  r.pos = a.batch.kv_len[0] - 1;
  r.n = r.pos + 1;
  const int by_grid = max(1, int(gridDim.x) / s.kv_heads);
  r.nsplit = max(1, min(min(by_grid, s.max_splits),
                        (r.n + kMegaMinSplitKeys - 1) / kMegaMinSplitKeys));
  r.chunk = (r.n + r.nsplit - 1) / r.nsplit;
  return r;
}

// Called by the producer lane when its weight stream reaches an attention step (the
// consumers are still on the qkv step): asks L2 for the first `max_keys` cached k and v rows
// of each of this block's tasks, so the key loop starts on L2 hits. Old positions only (the
// kernel never writes them); the new token's row may be fetched too (harmless).
__device__ void PrefetchKv(const MegaArgs& a, const MegaStep& s, int max_keys) {
  if (max_keys <= 0) return;
  const AttnSplits sp = SplitsOf(a, s);
  const bf16* kc = a.k_cache[s.layer];
  const bf16* vc = a.v_cache[s.layer];
  for (int task = blockIdx.x; task < s.kv_heads * sp.nsplit; task += gridDim.x) {
    const int g = task / sp.nsplit, p0 = (task % sp.nsplit) * sp.chunk;
    const int p1 = min(sp.n, p0 + min(sp.chunk, max_keys));
    for (int p = p0; p < p1; ++p) {
      const int64_t off = CacheRow(a.batch, p, s.kv_heads) + int64_t(g) * kMegaHeadDim;
      BulkPrefetchL2(kc + off, kMegaHeadDim * 2);
      BulkPrefetchL2(vc + off, kMegaHeadDim * 2);
    }
  }
}

// kAttnUnroll (<= 32): keys a warp loads at once (k and v rows: 16 bytes a lane per key).
template <int kAttnUnroll>
__device__ void AttentionStep(const MegaArgs& a, const MegaStep& s, void* smem_region) {
  AttnSmem& sm = *static_cast<AttnSmem*>(smem_region);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const DeviceBatchView& b = a.batch;
  const AttnSplits sp = SplitsOf(a, s);
  const int pos = sp.pos, n = sp.n, nsplit = sp.nsplit, chunk = sp.chunk;
  const int group = s.heads / s.kv_heads;
  const float scale2 = s.scale * kLog2e;
  bf16* kc = a.k_cache[s.layer];
  bf16* vc = a.v_cache[s.layer];
  const bf16* qkv = s.x;
  for (int task = blockIdx.x; task < s.kv_heads * nsplit; task += gridDim.x) {
    const int g = task / nsplit, split = task % nsplit;
    const int p0 = split * chunk, p1 = min(n, p0 + chunk);
    ConsumerSync();  // the previous task's readers of sm are done
    // 1. RoPE (pairs i, i + 64) of the group's q heads and of k; v as is.
    const int64_t slot = CacheRow(b, pos, s.kv_heads) + int64_t(g) * kMegaHeadDim;
    constexpr int kHalf = kMegaHeadDim / 2;
    for (int idx = tid; idx < (group + 1) * kHalf; idx += kConsumerThreads) {
      const int r = idx / kHalf, i = idx % kHalf;
      const bf16* row = qkv + int64_t(r < group ? g * group + r : s.heads + g) * kMegaHeadDim;
      float x0 = __bfloat162float(row[i]), x1 = __bfloat162float(row[i + kHalf]);
      RopeRotate(x0, x1, s.inv_freq[i], float(pos));
      const bf16 b0 = __float2bfloat16_rn(x0), b1 = __float2bfloat16_rn(x1);
      float* dst = r < group ? sm.q[r] : sm.k;
      dst[i] = __bfloat162float(b0), dst[i + kHalf] = __bfloat162float(b1);
      if (r == group && split == 0) kc[slot + i] = b0, kc[slot + i + kHalf] = b1;
    }
    for (int e = tid; e < kMegaHeadDim; e += kConsumerThreads) {
      const bf16 v = qkv[int64_t(s.heads + s.kv_heads + g) * kMegaHeadDim + e];
      sm.v[e] = __bfloat162float(v);
      if (split == 0) vc[slot + e] = v;
    }
    ConsumerSync();
    // 2. This warp's keys.
    float q[kMegaMaxGroup][4], m[kMegaMaxGroup], l[kMegaMaxGroup], acc[kMegaMaxGroup][4];
#pragma unroll
    for (int h = 0; h < kMegaMaxGroup; ++h) {
      m[h] = -INFINITY, l[h] = 0.0f;
#pragma unroll
      for (int d = 0; d < 4; ++d) {
        q[h][d] = h < group ? sm.q[h][4 * lane + d] : 0.0f;
        acc[h][d] = 0.0f;
      }
    }
    for (int p = p0 + warp; p < p1; p += kMegaConsumerWarps * kAttnUnroll) {
      // Keys p + 8u, u < kAttnUnroll: lane u looks up key u's cache row (-1: past the split,
      // or the new token, whose k and v come from shared memory), then every lane loads its 4
      // dims of all the rows at once (kAttnUnroll x 2 x 8 bytes in flight a lane).
      int64_t row_off = -1;
      {
        const int pp = p + lane * kMegaConsumerWarps;
        if (lane < kAttnUnroll && pp < p1 && pp != pos)
          row_off = CacheRow(b, pp, s.kv_heads) + int64_t(g) * kMegaHeadDim;
      }
      uint2 kr[kAttnUnroll], vr[kAttnUnroll];
#pragma unroll
      for (int u = 0; u < kAttnUnroll; ++u) {
        const int64_t off = __shfl_sync(0xffffffffu, row_off, u);
        kr[u] = vr[u] = make_uint2(0u, 0u);
        if (off >= 0) {
          kr[u] = *reinterpret_cast<const uint2*>(kc + off + 4 * lane);
          vr[u] = *reinterpret_cast<const uint2*>(vc + off + 4 * lane);
        }
      }
#pragma unroll
      for (int h = 0; h < kMegaMaxGroup; ++h) {
        if (h >= group) break;
        // Scores of the kAttnUnroll keys (log2 units; -inf past the split), one rescale.
        float t[kAttnUnroll];
        float mn = m[h];
#pragma unroll
        for (int u = 0; u < kAttnUnroll; ++u) {
          const int pp = p + u * kMegaConsumerWarps;
          float kf[4];
          if (pp == pos) {
#pragma unroll
            for (int d = 0; d < 4; ++d) kf[d] = sm.k[4 * lane + d];
          } else {
            Widen4(kr[u], kf);
          }
          float sc = 0.0f;
#pragma unroll
          for (int d = 0; d < 4; ++d) sc = fmaf(q[h][d], kf[d], sc);
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) sc += __shfl_xor_sync(0xffffffffu, sc, o);
          t[u] = pp < p1 ? sc * scale2 : -INFINITY;
          mn = fmaxf(mn, t[u]);
        }
        const float c = Exp2Or0(m[h], mn);
        l[h] *= c;
#pragma unroll
        for (int d = 0; d < 4; ++d) acc[h][d] *= c;
#pragma unroll
        for (int u = 0; u < kAttnUnroll; ++u) {
          const int pp = p + u * kMegaConsumerWarps;
          const float pr = Exp2Or0(t[u], mn);
          float vf[4];
          if (pp == pos) {
#pragma unroll
            for (int d = 0; d < 4; ++d) vf[d] = sm.v[4 * lane + d];
          } else {
            Widen4(vr[u], vf);
          }
          l[h] += pr;
#pragma unroll
          for (int d = 0; d < 4; ++d) acc[h][d] = fmaf(pr, vf[d], acc[h][d]);
        }
        m[h] = mn;
      }
    }
#pragma unroll
    for (int h = 0; h < kMegaMaxGroup; ++h) {
      if (h >= group) break;
      if (lane == 0) sm.m[warp][h] = m[h], sm.l[warp][h] = l[h];
#pragma unroll
      for (int d = 0; d < 4; ++d) sm.acc[warp][h][4 * lane + d] = acc[h][d];
    }
    ConsumerSync();
    // 3. Merge the warps: the output (one split) or this split's partial.
    for (int idx = tid; idx < group * kMegaHeadDim; idx += kConsumerThreads) {
      const int h = idx / kMegaHeadDim, e = idx % kMegaHeadDim;
      float mx = -INFINITY;
#pragma unroll
      for (int w = 0; w < kMegaConsumerWarps; ++w) mx = fmaxf(mx, sm.m[w][h]);
      float sum = 0.0f, val = 0.0f;
#pragma unroll
      for (int w = 0; w < kMegaConsumerWarps; ++w) {
        const float c = Exp2Or0(sm.m[w][h], mx);
        sum += sm.l[w][h] * c;
        val += sm.acc[w][h][e] * c;
      }
      const int head = g * group + h;
      if (nsplit == 1) {
        s.out[int64_t(head) * kMegaHeadDim + e] = __float2bfloat16_rn(sum > 0.0f ? val / sum : 0.0f);
      } else {
        float* part = s.partial + (int64_t(head) * s.max_splits + split) * (kMegaHeadDim + 2);
        part[e] = val;
        if (e == 0) part[kMegaHeadDim] = mx, part[kMegaHeadDim + 1] = sum;
      }
    }
    if (nsplit == 1) continue;
    // The last split block of kv head g merges the splits (threadFenceReduction).
    __threadfence();
    ConsumerSync();
    if (tid == 0) {
      const uint32_t arrived = atomicAdd(&s.group_counters[g], 1u);
      sm.last = arrived == uint32_t(nsplit - 1);
      if (sm.last) s.group_counters[g] = 0;  // ready for the next layer / launch
    }
    ConsumerSync();
    if (!sm.last) continue;
    __threadfence();
    for (int idx = tid; idx < group * kMegaHeadDim; idx += kConsumerThreads) {
      const int h = idx / kMegaHeadDim, e = idx % kMegaHeadDim;
      const int head = g * group + h;
      const float* part = s.partial + int64_t(head) * s.max_splits * (kMegaHeadDim + 2);
      float mx = -INFINITY;
      for (int i = 0; i < nsplit; ++i) mx = fmaxf(mx, __ldcg(part + i * (kMegaHeadDim + 2) + kMegaHeadDim));
      float sum = 0.0f, val = 0.0f;
      for (int i = 0; i < nsplit; ++i) {
        const float* pi = part + i * (kMegaHeadDim + 2);
        const float c = Exp2Or0(__ldcg(pi + kMegaHeadDim), mx);
        sum += __ldcg(pi + kMegaHeadDim + 1) * c;
        val += __ldcg(pi + e) * c;
      }
      s.out[int64_t(head) * kMegaHeadDim + e] = __float2bfloat16_rn(sum > 0.0f ? val / sum : 0.0f);
    }
  }
}

}  // namespace pg::cuda::mega
