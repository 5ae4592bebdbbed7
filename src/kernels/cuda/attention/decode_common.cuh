// Pieces shared by the two decode attention kernels (decode_attention.cu: CUDA cores, any
// shape; decode_attention_mma.cu: tensor cores, bf16 / fp8, head_dim 64/128): the run-time
// split count and split ranges, the log2-domain softmax helpers, and the end-of-block merge
// of the warps' partial results. Both kernels (and the combine) launch with PDL
// (common/pdl.cuh): before PdlWait they read only the batch plan and the cache's old rows.
#pragma once

#include <cuda_bf16.h>

#include <cmath>

#include "kernels/cuda/common/device_params.h"
#include "kernels/cuda/common/pdl.cuh"

namespace pg::cuda::decode {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kSplitGranule = 16;  // a split's key count is a multiple of this (the MMA tile)
// The cluster merge's largest cluster: a kv head's splits, one block each (a non-portable
// cluster size on sm_90; the launcher takes the merge only where num_splits fits).
constexpr int kMaxClusterSplits = 16;
// Keys a split takes when n keys are dealt over `active` splits: ceil(n / active), rounded up
// to kSplitGranule (the device's SplitOf and the host's plans alike).
template <class T>
__host__ __device__ constexpr T SplitChunk(T n, T active) {
  const T chunk = (n + active - 1) / active;
  return (chunk + kSplitGranule - 1) / kSplitGranule * kSplitGranule;
}
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, int src_bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(src_bytes));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ float Exp2Or0(float x, float m) {  // 2^(x - m); 0 for an empty m
  return m == -INFINITY ? 0.0f : exp2f(x - m);
}

// Sequence s's causal key range [lo, pos] (sliding window applied).
struct CausalRange {
  int lo, pos;
};
__device__ __forceinline__ CausalRange CausalOf(const AttentionArgs& a, int s) {
  const int pos = a.batch.kv_len[s] - 1;
  return {a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0, pos};
}

// The splits sequence s uses of the launch's num_splits (grid z, fixed when the graph was
// captured): one per min_split_keys keys of its causal range, at most num_splits, and at most
// one wave's worth (wave_splits) unless the sequence is long enough for the plan's count
// (8 * min_split_keys keys per split: the planner goes past one wave only for long contexts).
// Read from kv_len on the device, so the same graph serves every shorter context at the cost
// of that context: split blocks >= this exit at once, and the combine merges only these.
__device__ __forceinline__ int ActiveSplits(const AttentionArgs& a, int s, int num_splits) {
  const CausalRange c = CausalOf(a, s);
  const int n = c.pos + 1 - c.lo;
  int cap = num_splits;
  if (a.wave_splits > 0 && int64_t(n) < int64_t(num_splits) * 8 * a.min_split_keys)
    cap = min(cap, a.wave_splits);
  return max(1, min(cap, (n + a.min_split_keys - 1) / a.min_split_keys));
}

// The split [begin, end) of sequence s's causal key range [lo, pos] when it uses `active`
// splits: ceil(len / active) keys per split, rounded up to kSplitGranule (trailing splits
// may be empty).
struct SplitRange {
  int begin, end;
};
__device__ __forceinline__ SplitRange SplitOf(const AttentionArgs& a, int s, int split, int active) {
  const CausalRange c = CausalOf(a, s);
  const int n = c.pos + 1 - c.lo;
  const int chunk = SplitChunk(n, active);
  const int begin = c.lo + split * chunk;
  return {begin, min(c.pos + 1, begin + chunk)};
}

__device__ __forceinline__ void PrefetchL2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

// Merges the first `active` of the num_splits partials of (row t, head h) into the bf16
// output; threads of the block over head_dim. Partials written by other blocks are read
// through L2 (__ldcg).
__device__ __forceinline__ void CombineSplits(const AttentionArgs& a, int t, int h, int active,
                                              int e0, int step) {
  const int D = a.head_dim;
  const int64_t base = (int64_t(t) * a.heads + h) * a.num_splits;
  const float* ml = a.partial_ml + 2 * base;
  float mx = -INFINITY;
#pragma unroll 8
  for (int i = 0; i < active; ++i) mx = fmaxf(mx, __ldcg(ml + 2 * i));
  for (int e = e0; e < D; e += step) {
    float sum = 0.0f, val = 0.0f;
    // Independent loads, 8 in flight (an empty split has max -inf: weight 0, acc 0).
#pragma unroll 8
    for (int i = 0; i < active; ++i) {
      const float c = Exp2Or0(__ldcg(ml + 2 * i), mx);
      sum += __ldcg(ml + 2 * i + 1) * c;
      val += __ldcg(a.partial_acc + (base + i) * D + e) * c;
    }
    a.out[int64_t(t) * a.out_stride + int64_t(h) * D + e] =
        __float2bfloat16_rn(sum > 0.0f ? val / sum * a.v_scale : 0.0f);
  }
}

constexpr int kCombineMaxSplits = 256;  // DecodeAttentionSplits never plans more

// acc += c * p, component by component (a split's partial into a merge's sum).
__device__ __forceinline__ void AddScaled(float4& acc, float c, const float4& p) {
  acc.x += c * p.x, acc.y += c * p.y, acc.z += c * p.z, acc.w += c * p.w;
}

// Where a combine's split groups meet (CombineSplitsBlock, decode_attention.cu's combine
// kernel): row t, head h, head_dim d; thread v of group 0 (of `groups`, vecs threads a group:
// d / 4, or a part of them in the combine kernel) writes dims 4 (first + v) .. + 3.
struct CombineSlot {
  int t, h, d, v, vecs, groups;
  int first = 0;  // the block's first float4 vector of head_dim
};

// Group 0's thread adds groups 1 .. groups - 1 from red ([groups][vecs] float4 in shared
// memory, complete) to its own acc, in group order, and writes its 4 dims as bf16 scaled by
// v_scale / sum (0 for an empty sum).
__device__ __forceinline__ void StoreCombined(const AttentionArgs& a, const CombineSlot& c,
                                              const float4* red, float4 acc, float sum) {
  for (int k = 1; k < c.groups; ++k) {
    const float4 p = red[k * c.vecs + c.v];
    acc.x += p.x, acc.y += p.y, acc.z += p.z, acc.w += p.w;
  }
  const float inv = sum > 0.0f ? a.v_scale / sum : 0.0f;
  bf16* out = a.out + int64_t(c.t) * a.out_stride + int64_t(c.h) * c.d + 4 * (c.first + c.v);
  out[0] = __float2bfloat16_rn(acc.x * inv), out[1] = __float2bfloat16_rn(acc.y * inv);
  out[2] = __float2bfloat16_rn(acc.z * inv), out[3] = __float2bfloat16_rn(acc.w * inv);
}

// Merges the first S (<= kCombineMaxSplits) split partials of (row t, head h) into the bf16
// output with `nthreads` threads (ids tid; a multiple of head_dim / 4): threads are (4-float
// vector v of head_dim) x (split group), each group sums every G-th split with independent
// 16-byte loads, the groups meet in shared memory. scratch: [3 * kCombineMaxSplits] floats,
// red: [nthreads] float4 (shared); sync(): a barrier of the nthreads threads. Partials written
// by other blocks are read through L2 (__ldcg). Ends with sync() (scratch reusable).
// live = false: the threads only take part in the barriers (a team with no head this round).
template <typename Sync>
__device__ __forceinline__ void CombineSplitsBlock(const AttentionArgs& a, int t, int h, int S,
                                                   int tid, int nthreads, float* scratch,
                                                   float4* red, Sync sync, bool live = true) {
  if (!live) {
    sync(), sync(), sync(), sync();  // as many barriers as a live team's
    return;
  }
  const int D = a.head_dim;
  const int64_t base = (int64_t(t) * a.heads + h) * a.num_splits;
  float* m_s = scratch;
  float* l_s = scratch + kCombineMaxSplits;
  float* w = scratch + 2 * kCombineMaxSplits;
  const float* ml = a.partial_ml + 2 * base;
  for (int i = tid; i < S; i += nthreads) m_s[i] = __ldcg(ml + 2 * i), l_s[i] = __ldcg(ml + 2 * i + 1);
  sync();
  float mx = -INFINITY;
  for (int i = 0; i < S; ++i) mx = fmaxf(mx, m_s[i]);
  for (int i = tid; i < S; i += nthreads) w[i] = Exp2Or0(m_s[i], mx);
  sync();
  float sum = 0.0f;
  for (int i = 0; i < S; ++i) sum += w[i] * l_s[i];
  const int vecs = D / 4, groups = nthreads / vecs;
  const int v = tid % vecs, grp = tid / vecs;
  float4 acc = make_float4(0, 0, 0, 0);
  if (grp < groups) {
#pragma unroll 4
    for (int i = grp; i < S; i += groups) {
      const float4 p = __ldcg(reinterpret_cast<const float4*>(a.partial_acc + (base + i) * D) + v);
      AddScaled(acc, w[i], p);
    }
  }
  red[tid] = acc;
  sync();
  if (grp == 0) StoreCombined(a, CombineSlot{t, h, D, v, vecs, groups}, red, acc, sum);
  sync();
}

// After a block wrote its split's partials of row t's heads [h0, h0 + ng): the last of the
// row's `active` split blocks (same blockIdx.y) to arrive merges the splits
// (threadFenceReduction) and resets the arrival counter. No-op without counters (a combine
// kernel runs instead) or with one active split (the block wrote the output).
// Block-wide (every thread calls it; returns the same value to all): this block's split
// partials are published (fence), it counts itself on row t's arrival counter of its kv head
// (blockIdx.y), and returns true in the last of the `active` split blocks to arrive, which
// resets the counter for the next launch and then sees every other block's partials.
// *p += v by one thread with acquire-release semantics at GPU scope; returns the old value.
__device__ __forceinline__ int AtomicAddAcqRel(int* p, int v) {
  int old;
  asm volatile("atom.add.acq_rel.gpu.global.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// split_release: one release / acquire atomic by thread 0 between two block barriers (the
// barrier orders the block's stores before it; cumulativity publishes them) instead of a fence
// in every thread and a second one in the merging block.
__device__ __forceinline__ bool LastSplitArrives(const AttentionArgs& a, int t, int active) {
  __shared__ bool last;
  if (!a.split_release) __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    int* counter = a.split_counters + int64_t(t) * gridDim.y + blockIdx.y;
    const int old = a.split_release ? AtomicAddAcqRel(counter, 1) : atomicAdd(counter, 1);
    last = old == active - 1;
    if (last) *counter = 0;  // ready for the next launch
  }
  __syncthreads();
  if (last && !a.split_release) __threadfence();
  return last;
}

__device__ __forceinline__ void FinishSplits(const AttentionArgs& a, int t, int h0, int ng,
                                             int active) {
  if (active == 1 || a.split_counters == nullptr) return;
  if (!LastSplitArrives(a, t, active)) return;
  const int warps = blockDim.x / 32;
  for (int g = threadIdx.x / 32; g < ng; g += warps)
    CombineSplits(a, t, h0 + g, active, threadIdx.x % 32, 32);
}

// After __syncthreads: merges the warps' (max, sum, acc) of `ng` heads from shared memory
// (sm_acc [kWarps][rows][D], sm_m / sm_l [kWarps][rows]; maxima in log2 units) and writes
// query row t's heads h0.. : the bf16 output (one active split) or the split's partial
// (layout [row][head][a.num_splits][...]), then (finish) FinishSplits.
__device__ __forceinline__ void MergeWarpsAndStore(const AttentionArgs& a, const float* sm_acc,
                                                   const float* sm_m, const float* sm_l,
                                                   int rows, int ng, int D, int t, int h0,
                                                   int split, int active, bool finish = true,
                                                   float* cluster_part = nullptr) {
  for (int idx = threadIdx.x; idx < ng * D; idx += kThreads) {
    const int g = idx / D, e = idx % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, sm_m[w * rows + g]);
    float sum = 0.0f, val = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float c = Exp2Or0(sm_m[w * rows + g], mx);
      sum += sm_l[w * rows + g] * c;
      val += sm_acc[(w * rows + g) * D + e] * c;
    }
    const int h = h0 + g;
    if (active == 1) {
      a.out[int64_t(t) * a.out_stride + int64_t(h) * D + e] =
          __float2bfloat16_rn(sum > 0.0f ? val / sum * a.v_scale : 0.0f);
    } else if (cluster_part != nullptr) {  // ClusterPart layout (decode_fused.cuh)
      cluster_part[g * D + e] = val;
      if (e == 0) cluster_part[ng * D + g] = mx, cluster_part[ng * D + ng + g] = sum;
    } else {
      const int64_t base = (int64_t(t) * a.heads + h) * a.num_splits + split;
      a.partial_acc[base * D + e] = val;
      if (e == 0) a.partial_ml[2 * base] = mx, a.partial_ml[2 * base + 1] = sum;
    }
  }
  if (finish) FinishSplits(a, t, h0, ng, active);
}

// Tensor-core decode kernel (decode_attention_mma.cu): bf16 or fp8 caches, head_dim 64/128.
bool MmaSupports(int head_dim, int group, KvType kv_type);
// Its launch shape for a batch of num_seqs decode rows: grid rows (gridDim.y), warps per
// block, resident blocks per SM, and query heads per block (for the combine choice).
struct MmaShape {
  int grid_rows, warps, per_sm, heads_per_block;
};
MmaShape MmaLaunchShape(const AttentionArgs& a);
void LaunchMma(const AttentionArgs& a, int num_seqs, cudaStream_t stream);
// Streaming decode kernel (decode_stream.cu): a block per (sequence, split) over every kv
// head, a producer warp's bulk-copy ring; bf16 / fp8, head_dim 64 / 128, group <= 16,
// kv_heads <= 8. Its splits are merged in the kernel by a row's last blocks (split counters)
// or by the combine kernel (no counters). Launch
// shape: grid_rows 1, warps (consumers + producer), per_sm, heads_per_block = heads.
bool StreamSupports(const AttentionArgs& a);
int StreamMinSplitKeys();  // keys per active split at least (PG_DSTREAM_MIN_SPLIT_KEYS)
MmaShape StreamLaunchShape(const AttentionArgs& a);
// Blocks per row that merge its splits inside the kernel (0, the default: the combine kernel
// does; PG_DSTREAM_MERGE=1 asks for the in-kernel merge); a.split_counters must then hold
// 2 * num_tokens counters.
int StreamMergers(const AttentionArgs& a, int num_seqs);
void LaunchStream(const AttentionArgs& a, int num_seqs, int mergers, cudaStream_t stream);
// The streaming kernel with the new token's RoPE + cache write inside (RopeKvWriteAttention;
// the combine kernel merges its splits): where the rotation layout and the block allow.
bool StreamFusedSupports(const AttentionArgs& a, const RopeKvWriteArgs& rope);
void LaunchStreamFused(const AttentionArgs& a, const RopeKvWriteArgs& rope, int num_seqs,
                       cudaStream_t stream);
// The fused decode attention (RopeKvWrite + Attention, decode_fused.cuh): the round-robin
// layout (a block per (sequence, kv head, split), 4 warps), splits merged in the kernel (needs
// a.split_counters); rope.q / rope.kv.k / rope.kv.v: the raw new rows, not modified.
// MmaFusedShape: the 3-stage kernel's (the split plan uses it for both variants); small: 0 that
// kernel, 3 / 4 the small variant with that many tile warps (27-36 KB of shared memory a
// block at d 128 instead of ~102 KB); small_stages: its ring stages a warp, 1, or 2 (d 128
// bf16 with 4 tile warps only; ~67 KB a block: both stages load before PdlWait); xw: the small
// variant's exchange form (decode_xw.cuh; bf16 caches, ignored otherwise), which the caller
// takes only where every split's tiles fit its rings (small x small_stages tiles).
bool MmaFusedSupports(int head_dim, int group);
MmaShape MmaFusedShape(const AttentionArgs& a);
void LaunchMmaFused(const AttentionArgs& a, const RopeKvWriteArgs& rope, int num_seqs, int small,
                    int small_stages, bool xw, cudaStream_t stream);

}  // namespace pg::cuda::decode
