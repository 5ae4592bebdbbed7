// Decode attention (sequences with one new token; others are skipped: the prefill / general
// kernels' rows) over a paged bf16 or fp8 KV cache
// (ops.h layout: [pages, page_size, kv_heads, head_dim]), flash-decoding style. bf16 caches
// of head_dim 64 / 128 with GQA groups <= 16 go to the tensor-core kernel
// (decode_attention_mma.cu); this file's CUDA-core kernel takes every other shape and fp8,
// and owns the split planning (decode_plan.h; the fused kernel's plans build on it in
// decode_fused_plan.cu) and the combine kernel for both.
//
// Work split: a block owns (sequence, kv head, chunk of up to GP of that kv head's query
// heads, split). GQA heads are packed: the block streams each K/V row once for all GP heads.
// The grid has num_splits splits per sequence, planned on the host for the longest kv length
// (fixed at graph capture). On the device each sequence uses ActiveSplits of them, one per
// min_split_keys keys of its causal range [lo, pos] (decode_common.cuh), each ceil(len /
// active) keys rounded up to 16: surplus split blocks exit at once, and a sequence with one
// active split is written directly (the combine kernel skips it). So a graph captured for
// 32K costs what a 1K plan costs at 1K.
// Kernels are launched with PDL (common/pdl.cuh): before PdlWait they read only the batch
// plan and (tensor-core kernel) warm L2 with their first cache tiles.
//
// Inside a block: 4 warps take the split's key tiles round robin. A warp holds KG = 32 / L
// keys at a time, L lanes per key; each lane holds EPL = 16 consecutive-by-vector elements
// of the head dim (two 16-byte bf16 vectors, or one 16-byte fp8 vector), so a q.k dot
// product needs log2(L) shuffles (L = 8 for d = 128). Each warp keeps kStages tiles in
// flight with cp.async into its own shared-memory ring; a lane reads back only the bytes it
// copied itself, so no barrier is needed in the loop. Softmax is online in fp32 and in log2
// units (q carries scale * log2(e)); the running max is rescaled only when it grows.
// Warps and key groups merge at the end; with one split the block writes the normalised
// bf16 output, else an unnormalised partial (acc, max, sum) that CombineKernel merges.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>

#include "core/env.h"
#include "kernels/cuda/attention/decode_common.cuh"
#include "kernels/cuda/attention/decode_fused.h"
#include "kernels/cuda/attention/decode_plan.h"
#include "kernels/cuda/attention/kv_types.cuh"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/device_params.h"
#include "kernels/cuda/common/warp_reduce.cuh"

namespace pg::cuda {
namespace {

using namespace decode;  // kWarps, kThreads, CpAsync*, Exp2Or0, SplitOf, MergeWarpsAndStore

constexpr int kStages = 4;        // tiles in flight per warp (cp.async ring depth)
constexpr int kU = 2;             // keys per lane group per tile
constexpr int kEplTarget = 16;    // head-dim elements per lane per key

constexpr int Pow2Ceil(int x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}

// Compile-time geometry of a (head_dim, cache type) pair.
template <int D, typename KvT>
struct Geo {
  static constexpr int kVec = kv::Traits<KvT>::kVec;                      // elements / vector
  static constexpr int kNvec = D / kVec;                                  // vectors per row
  static constexpr int kNv = kEplTarget / kVec > 0 ? kEplTarget / kVec : 1;  // vectors / lane
  static constexpr int kLanes = Pow2Ceil((kNvec + kNv - 1) / kNv);        // lanes per key (L)
  static constexpr int kGroups = 32 / kLanes;                             // keys per warp step
  static constexpr int kTileKeys = kGroups * kU;                          // keys per warp tile
  static constexpr int kEpl = kNv * kVec;
  static constexpr int kStageU4 = 2 * kU * kNv * 32;                      // uint4 per stage
  static constexpr int kSmemBytes = kWarps * kStages * kStageU4 * 16;
  static_assert(D % kVec == 0, "head_dim must be a multiple of the 16-byte vector");
  static_assert(kLanes <= 32, "head_dim too large");
  // The warps' merge reuses the ring: [kWarps][4][D] accumulators + [kWarps][4] max and sum.
  static_assert(kWarps * 4 * (D + 2) * 4 <= kSmemBytes, "merge does not fit the ring");
};

template <int D, int GP, typename KvT>
__global__ void __launch_bounds__(kThreads) DecodeKernel(const __grid_constant__ AttentionArgs a) {
  PG_BLOCK_TRACE(kTraceDecode);
  using G = Geo<D, KvT>;
  constexpr int L = G::kLanes, NV = G::kNv, VEC = G::kVec, EPL = G::kEpl;
  extern __shared__ uint4 smem[];

  const DeviceBatchView& b = a.batch;
  const int s = blockIdx.x;
  if (b.q_len[s] != 1) return;  // a multi-token sequence: another kernel's (block-uniform)
  const int group = a.heads / a.kv_heads;
  const int head_chunks = (group + GP - 1) / GP;
  const int kvh = blockIdx.y / head_chunks, hc = blockIdx.y % head_chunks;
  const int split = blockIdx.z, num_splits = gridDim.z;
  const int active_splits = ActiveSplits(a, s, num_splits);
  if (split >= active_splits) return;  // surplus split of a graph planned for longer contexts
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kg = lane / L, j = lane % L;
  const int t = b.q_start[s];  // the sequence's only query row
  const int h0 = kvh * group + hc * GP;
  const int ng = min(GP, group - hc * GP);  // valid heads of this chunk
  const SplitRange r = SplitOf(a, s, split, active_splits);
  const int32_t* pages = b.page_table + b.page_start[s];
  const int ps = b.page_size;
  if (!a.pdl_late_trigger) PdlTrigger();
  PdlWait();  // PDL: q and the new token's K/V (the previous kernel's) are visible from here

  // This lane's vectors: c-th is vector c * L + j of the row (valid below kNvec).
  bool vec_ok[NV];
#pragma unroll
  for (int c = 0; c < NV; ++c) vec_ok[c] = c * L + j < G::kNvec;

  // q, pre-scaled into log2 units (softcap: natural units, converted after the tanh).
  const float qscale = a.logit_scale * (a.softcap > 0.0f ? 1.0f : kLog2e);
  float q[GP][EPL];
#pragma unroll
  for (int g = 0; g < GP; ++g)
#pragma unroll
    for (int c = 0; c < NV; ++c) {
      const bool ok = g < ng && vec_ok[c];
      const bf16* src = a.q + int64_t(t) * a.q_stride + int64_t(h0 + (ok ? g : 0)) * D +
                        (ok ? (c * L + j) * VEC : 0);
#pragma unroll
      for (int h = 0; h < VEC / 8; ++h) {
        float f[8];
        if (ok) {
          kv::Traits<bf16>::Widen(*reinterpret_cast<const uint4*>(src + 8 * h), f);
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e) f[e] = 0.0f;
        }
#pragma unroll
        for (int e = 0; e < 8; ++e) q[g][c * VEC + 8 * h + e] = f[e] * qscale;
      }
    }

  float m[GP], l[GP], acc[GP][EPL];
#pragma unroll
  for (int g = 0; g < GP; ++g) {
    m[g] = -INFINITY, l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < EPL; ++e) acc[g][e] = 0.0f;
  }

  const int keys = max(0, r.end - r.begin);
  const int tiles = (keys + G::kTileKeys - 1) / G::kTileKeys;
  const int my_tiles = warp < tiles ? (tiles - warp + kWarps - 1) / kWarps : 0;
  uint4* ring = smem + warp * (kStages * G::kStageU4);
  const char* kc = static_cast<const char*>(a.k_cache);
  const char* vc = static_cast<const char*>(a.v_cache);
  const int64_t row_bytes = int64_t(D) * sizeof(KvT);
  const int64_t slot_bytes = int64_t(a.kv_heads) * row_bytes;

  // Starts the copy of this warp's i-th tile into ring stage i % kStages.
  auto issue = [&](int i) {
    uint4* st = ring + (i % kStages) * G::kStageU4;
    const int key0 = r.begin + (warp + i * kWarps) * G::kTileKeys;
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int key = min(key0 + u * G::kGroups + kg, r.end - 1);  // clamped: masked later
      const int64_t off = (int64_t(pages[key / ps]) * ps + key % ps) * slot_bytes +
                          int64_t(kvh) * row_bytes;
#pragma unroll
      for (int c = 0; c < NV; ++c) {
        const int64_t vo = off + int64_t(vec_ok[c] ? c * L + j : 0) * 16;
        const int bytes = vec_ok[c] ? 16 : 0;  // 0: zero-fill (q is 0 there too)
        CpAsync16(st + (u * NV + c) * 32 + lane, kc + vo, bytes);
        CpAsync16(st + (kU + u) * NV * 32 + c * 32 + lane, vc + vo, bytes);
      }
    }
  };

#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < my_tiles) issue(i);
    CpAsyncCommit();
  }
  for (int i = 0; i < my_tiles; ++i) {
    if (i + kStages - 1 < my_tiles) issue(i + kStages - 1);
    CpAsyncCommit();
    CpAsyncWait<kStages - 1>();  // tile i has landed (this lane's part)
    const uint4* st = ring + (i % kStages) * G::kStageU4;
    const int key0 = r.begin + (warp + i * kWarps) * G::kTileKeys;

    float sc[kU][GP];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      float kf[EPL];
#pragma unroll
      for (int c = 0; c < NV; ++c) kv::Traits<KvT>::Widen(st[(u * NV + c) * 32 + lane], kf + c * VEC);
      const bool live = key0 + u * G::kGroups + kg < r.end;
#pragma unroll
      for (int g = 0; g < GP; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < EPL; ++e) dot = fmaf(q[g][e], kf[e], dot);
#pragma unroll
        for (int o = L / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        if (a.softcap > 0.0f) dot = a.softcap * tanhf(dot / a.softcap) * kLog2e;
        sc[u][g] = live ? dot : -INFINITY;
      }
    }
#pragma unroll
    for (int g = 0; g < GP; ++g) {
      float mx = m[g];
#pragma unroll
      for (int u = 0; u < kU; ++u) mx = fmaxf(mx, sc[u][g]);
      if (mx > m[g]) {  // the running max grew: rescale (rare once the max settles)
        const float corr = Exp2Or0(m[g], mx);
        l[g] *= corr;
#pragma unroll
        for (int e = 0; e < EPL; ++e) acc[g][e] *= corr;
        m[g] = mx;
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        sc[u][g] = Exp2Or0(sc[u][g], m[g]);
        l[g] += sc[u][g];
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      float vf[EPL];
#pragma unroll
      for (int c = 0; c < NV; ++c)
        kv::Traits<KvT>::Widen(st[(kU + u) * NV * 32 + c * 32 + lane], vf + c * VEC);
#pragma unroll
      for (int g = 0; g < GP; ++g)
#pragma unroll
        for (int e = 0; e < EPL; ++e) acc[g][e] = fmaf(sc[u][g], vf[e], acc[g][e]);
    }
  }
  CpAsyncWait<0>();
  if (a.pdl_late_trigger) PdlTrigger();

  // Merge the key groups of the warp (lanes j, j + L, j + 2L, ... hold the same dims).
#pragma unroll
  for (int o = L; o < 32; o <<= 1)
#pragma unroll
    for (int g = 0; g < GP; ++g) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[g], o);
      const float lo_ = __shfl_xor_sync(0xffffffffu, l[g], o);
      const float mx = fmaxf(m[g], mo);
      const float ca = Exp2Or0(m[g], mx), cb = Exp2Or0(mo, mx);
      l[g] = l[g] * ca + lo_ * cb;
#pragma unroll
      for (int e = 0; e < EPL; ++e)
        acc[g][e] = acc[g][e] * ca + __shfl_xor_sync(0xffffffffu, acc[g][e], o) * cb;
      m[g] = mx;
    }

  // Merge the warps through shared memory (the ring is free now).
  __syncthreads();
  float* sm_acc = reinterpret_cast<float*>(smem);  // [kWarps][GP][D]
  float* sm_m = sm_acc + kWarps * GP * D;          // [kWarps][GP]
  float* sm_l = sm_m + kWarps * GP;                // [kWarps][GP]
  if (kg == 0) {
#pragma unroll
    for (int g = 0; g < GP; ++g) {
      if (j == 0) sm_m[warp * GP + g] = m[g], sm_l[warp * GP + g] = l[g];
#pragma unroll
      for (int c = 0; c < NV; ++c)
        if (vec_ok[c])
#pragma unroll
          for (int e = 0; e < VEC; ++e)
            sm_acc[(warp * GP + g) * D + (c * L + j) * VEC + e] = acc[g][c * VEC + e];
    }
  }
  __syncthreads();
  MergeWarpsAndStore(a, sm_acc, sm_m, sm_l, GP, ng, D, t, h0, split, active_splits);
}

// Merges the splits of one (row, head) when the kernels did not (no split counters): block
// (t, h, part) of a grid (rows, heads, parts) takes head_dim / parts of the dims (CombineParts
// picks parts so that the grid covers the SMs: one row's 32 heads as 128 blocks, not 32), its
// kCombineThreads threads = (4-float vector v of those dims) x (split group; threads past the
// last whole group only reduce). What the batch plan decides (the row's sequence, whether it is
// a decode row, its active splits S) is read before PdlWait (uploaded before the step). After
// it, one round of loads: each thread's (max, sum) of one split (S <= kCombineMaxSplits =
// kCombineThreads) and its group's first kCombineInFlight partial vectors (the group sums every
// G-th split), issued together; the max and the weighted sum by lane shuffles and one pass over
// the warps'; splits past the first round (S > kCombineInFlight x groups) in further rounds; the
// groups meet in shared memory, in group order. (Session 23's form, one block a head with 8
// groups, took 6.4 us a block after its wait at Llama-3.1-8B 1 x 32K: three rounds of partial
// loads after the (max, sum) round, while the next projection's ring fill loads the memory
// system; the form before it, 7.9 us, also read the plan after the wait and looped over all S
// splits in every thread. H200 block traces, docs/PERF.md "Session 23" / "Session 24".)
constexpr int kCombineThreads = 256;
constexpr int kCombineInFlight = 8;      // partial vectors a thread loads in the first round
constexpr int kCombineMinVecs = 8;       // float4 vectors of head_dim a block takes, at least
static_assert(kCombineThreads >= kCombineMaxSplits && kCombineThreads % 32 == 0,
              "a split a thread, whole warps");

__global__ void __launch_bounds__(kCombineThreads) DecodeCombineKernel(const __grid_constant__ AttentionArgs a) {
  PG_BLOCK_TRACE(kTraceDecodeCombine);
  const int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const int lane = tid % 32, warp = tid / 32;
  constexpr int kWarpsC = kCombineThreads / 32;
  const int s_row = a.batch.token_seq[t];
  const int S = a.batch.q_len[s_row] == 1 ? ActiveSplits(a, s_row, a.num_splits) : 1;
  PdlTrigger();
  // Every block waits (PDL), even one with nothing to merge: this kernel must not complete
  // before the attention kernel did (the next kernel reads rows it wrote directly).
  PdlWait();
  if (S == 1) return;  // not a decode row, or the attention block wrote the output
  __shared__ float w_s[kCombineMaxSplits];
  __shared__ float red_m[kWarpsC], red_l[kWarpsC];
  __shared__ float4 red[kCombineThreads];
  const int D = a.head_dim;
  const int vecs = D / 4 / int(gridDim.z), groups = kCombineThreads / vecs;  // this block's
  const int v = tid % vecs, grp = tid / vecs;
  const int64_t base = (int64_t(t) * a.heads + h) * a.num_splits;
  // Partial vector of split i for this thread: dims 4 (blockIdx.z vecs + v) .. + 3.
  const float4* p4 = reinterpret_cast<const float4*>(a.partial_acc + base * D) + blockIdx.z * vecs + v;
  const bool has = tid < S;
  const float mi = has ? __ldcg(a.partial_ml + 2 * (base + tid)) : -INFINITY;
  const float li = has ? __ldcg(a.partial_ml + 2 * (base + tid) + 1) : 0.0f;
  const bool live = grp < groups;
  float4 pv[kCombineInFlight];
#pragma unroll
  for (int k = 0; k < kCombineInFlight; ++k) {
    const int i = grp + k * groups;
    pv[k] = live && i < S ? __ldcg(p4 + int64_t(i) * (D / 4)) : make_float4(0, 0, 0, 0);
  }
  float mx = WarpMax(mi);
  if (lane == 0) red_m[warp] = mx;
  __syncthreads();
  mx = red_m[0];
#pragma unroll
  for (int k = 1; k < kWarpsC; ++k) mx = fmaxf(mx, red_m[k]);
  const float wi = has ? Exp2Or0(mi, mx) : 0.0f;
  if (has) w_s[tid] = wi;
  const float sl = WarpSum(wi * li);
  if (lane == 0) red_l[warp] = sl;
  __syncthreads();  // w_s and red_l complete
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kWarpsC; ++k) sum += red_l[k];
  float4 acc = make_float4(0, 0, 0, 0);
  if (live) {
#pragma unroll
    for (int k = 0; k < kCombineInFlight; ++k) {
      const int i = grp + k * groups;
      if (i >= S) break;
      const float c = w_s[i];
      AddScaled(acc, c, pv[k]);
    }
#pragma unroll 8
    for (int i = grp + kCombineInFlight * groups; i < S; i += groups) {
      const float4 p = __ldcg(p4 + int64_t(i) * (D / 4));
      const float c = w_s[i];
      AddScaled(acc, c, p);
    }
  }
  red[tid] = acc;
  __syncthreads();
  if (grp == 0)
    StoreCombined(a, CombineSlot{t, h, D, v, vecs, groups, int(blockIdx.z) * vecs}, red, acc, sum);
}

// The combine's dim parts (gridDim.z): doubled while the grid has fewer blocks than SMs, each
// block keeping >= kCombineMinVecs whole float4 vectors of head_dim.
static int CombineParts(const AttentionArgs& a) {
  const int sms = std::max(1, MultiprocessorCount()), vecs = a.head_dim / 4;
  int parts = 1;
  while (int64_t(a.batch.num_tokens) * a.heads * parts < sms && vecs % (2 * parts) == 0 &&
         vecs / (2 * parts) >= kCombineMinVecs)
    parts *= 2;
  return parts;
}

// GP: query heads per block (1 for MHA, else 4; larger groups take several blocks).
int HeadsPerBlock(int group) { return group == 1 ? 1 : 4; }

template <int D, int GP, typename KvT>
const void* KernelPtr() {
  return reinterpret_cast<const void*>(&DecodeKernel<D, GP, KvT>);
}

// Resident blocks per SM of one instantiation (opts into > 48 KB of shared memory once).
template <int D, int GP, typename KvT>
int Occupancy() {
  static const int blocks = [] {
    const void* k = KernelPtr<D, GP, KvT>();
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, Geo<D, KvT>::kSmemBytes);
    int n = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, kThreads, Geo<D, KvT>::kSmemBytes);
    return n > 0 ? n : 1;
  }();
  return blocks;
}

template <int D, int GP, typename KvT>
void Launch(const AttentionArgs& a, dim3 grid, cudaStream_t stream) {
  (void)Occupancy<D, GP, KvT>();  // sets the shared-memory attribute
  LaunchPdl(DecodeKernel<D, GP, KvT>, grid, dim3(kThreads), size_t(Geo<D, KvT>::kSmemBytes), stream, a);
}

// Calls f.template Run<D, GP, KvT>() for the args' specialisation; false if there is none.
template <typename F>
bool Dispatch(int d, int group, KvType kt, F& f) {
  const bool bf = kt == KvType::kBF16;
  const bool mha = HeadsPerBlock(group) == 1;
#define PG_DECODE_CASE(DIM)                                                   \
  case DIM:                                                                   \
    if (bf) {                                                                 \
      mha ? f.template Run<DIM, 1, bf16>() : f.template Run<DIM, 4, bf16>();  \
      return true;                                                            \
    }                                                                         \
    if constexpr (DIM % 16 == 0) {                                            \
      mha ? f.template Run<DIM, 1, kv::fp8>() : f.template Run<DIM, 4, kv::fp8>(); \
      return true;                                                            \
    }                                                                         \
    return false;
  switch (d) {
    PG_DECODE_CASE(32)
    PG_DECODE_CASE(40)
    PG_DECODE_CASE(64)
    PG_DECODE_CASE(80)
    PG_DECODE_CASE(96)
    PG_DECODE_CASE(128)
    PG_DECODE_CASE(256)
    default: return false;
  }
#undef PG_DECODE_CASE
}

struct NoOp {
  template <int D, int GP, typename KvT>
  void Run() {}
};
struct GetOccupancy {
  int per_sm = 1;
  template <int D, int GP, typename KvT>
  void Run() { per_sm = Occupancy<D, GP, KvT>(); }
};
struct DoLaunch {
  const AttentionArgs& a;
  dim3 grid;
  cudaStream_t stream;
  template <int D, int GP, typename KvT>
  void Run() { Launch<D, GP, KvT>(a, grid, stream); }
};

}  // namespace

// The tensor-core kernel where it applies (PG_DECODE_SIMT=1 in the environment forces the
// CUDA-core kernel: A/B benchmarks).
bool UseMma(const AttentionArgs& a) {
  static const bool simt = EnvFlag("PG_DECODE_SIMT", false);
  return !simt && MmaSupports(a.head_dim, a.heads / a.kv_heads, a.kv_type);
}

// The streaming kernel (decode_stream.cu) where it applies, before the tensor-core kernel
// (PG_DECODE_STREAM=0: off, the A/B switch; PG_DECODE_SIMT=1 turns it off too).
bool UseStream(const AttentionArgs& a) {
  static const bool on = EnvFlag("PG_DECODE_STREAM", true) && !EnvFlag("PG_DECODE_SIMT", false);
  return on && StreamSupports(a);
}

// A/B knobs over the args' defaults: PG_DECODE_MIN_SPLIT_KEYS (keys per active split),
// PG_DECODE_PDL_LATE (0: PDL trigger at the kernels' start, not after the key loop) and
// PG_DECODE_L2_PREFETCH (tensor-core kernel: tiles of L2 prefetch ahead of the ring; -1: no
// prefetch, not even of the first tiles before the PDL wait). stream: the launch runs the
// streaming kernel, whose splits take at least StreamMinSplitKeys keys (unless
// PG_DECODE_MIN_SPLIT_KEYS says otherwise).
void decode::ApplyKnobs(AttentionArgs& a, bool stream) {
  static const int min_keys = EnvInt("PG_DECODE_MIN_SPLIT_KEYS", 0);
  static const int prefetch = EnvInt("PG_DECODE_L2_PREFETCH", -2);
  static const int late = EnvInt("PG_DECODE_PDL_LATE", -1);
  static const bool release = EnvFlag("PG_SPLIT_RELEASE", true);
  a.split_release = release;
  if (late >= 0) a.pdl_late_trigger = late != 0;
  if (min_keys > 0) a.min_split_keys = min_keys;
  else if (stream) a.min_split_keys = std::max(a.min_split_keys, StreamMinSplitKeys());
  if (prefetch >= -1) a.l2_prefetch_tiles = prefetch;
  a.min_split_keys = std::max(1, a.min_split_keys);
}

bool DecodeAttentionSupports(int head_dim, int group, KvType kv_type) {
  NoOp f;
  return group >= 1 && (MmaSupports(head_dim, group, kv_type) || Dispatch(head_dim, group, kv_type, f));
}

// Blocks resident at once, and blocks per split of a batch of num_seqs decode rows.
struct GridShape {
  int64_t capacity, base;
};
static GridShape ShapeOf(const AttentionArgs& a, int num_seqs, bool fused = false) {
  const int group = a.heads / a.kv_heads;
  int per_sm = 1, grid_rows = 0;
  if (fused) {
    const MmaShape sh = MmaFusedShape(a);
    per_sm = sh.per_sm, grid_rows = sh.grid_rows;
  } else if (UseStream(a)) {
    const MmaShape sh = StreamLaunchShape(a);
    per_sm = sh.per_sm, grid_rows = sh.grid_rows;
  } else if (UseMma(a)) {
    const MmaShape sh = MmaLaunchShape(a);
    per_sm = sh.per_sm, grid_rows = sh.grid_rows;
  } else {
    GetOccupancy occ;
    Dispatch(a.head_dim, group, a.kv_type, occ);
    const int gp = HeadsPerBlock(group);
    per_sm = occ.per_sm, grid_rows = a.kv_heads * ((group + gp - 1) / gp);
  }
  const int sms = std::max(1, MultiprocessorCount());
  return {int64_t(sms) * per_sm, std::max<int64_t>(1, int64_t(num_seqs) * grid_rows)};
}

int decode::PlanSplits(const AttentionArgs& args, int num_seqs, int64_t max_len, bool fused) {
  AttentionArgs a = args;
  ApplyKnobs(a, !fused && UseStream(a));
  const auto [capacity, base] = ShapeOf(a, num_seqs, fused);
  const int64_t max_splits = std::max<int64_t>(
      1, std::min<int64_t>(kCombineMaxSplits, max_len / a.min_split_keys));
  // Fewest splits with the least work per block-slot: minimise waves(S) / S.
  int best = 1;
  double best_cost = 1e30;
  for (int64_t sp = 1; sp <= max_splits; ++sp) {
    const double waves = double((base * sp + capacity - 1) / capacity);
    const double cost = waves / double(sp);
    if (cost < best_cost * 0.999) best_cost = cost, best = int(sp);
  }
  return best;
}

int DecodeAttentionSplits(const AttentionArgs& a, int num_seqs, int64_t max_len) {
  return PlanSplits(a, num_seqs, max_len, /*fused=*/false);
}

bool DecodeStreamRuns(const AttentionArgs& a) { return UseStream(a); }

// Decode batches of <= 8 rows: RopeKvWrite + the streaming kernel instead of the fused kernel
// from PG_DSTREAM_FUSED_MIN_KEYS keys in the plan (sequences x longest causal range; default
// 16384 with bf16 caches, 32768 with fp8: the fused op already declines fp8 plans past 16K
// keys, and below that fp8 fused is faster). Measured (H200, requests 2-3, us per op, fused
// vs composed): bf16 1 x 8K 21.8 vs 27.4, 4 x 2K 23.5 vs 25.5, 8 x 2K 36.2 vs 34.6, 1 x 16K
// 35.6 vs 33.9, 2 x 16K 64.6 vs 47.7, 1 x 32K 60.5 vs 50.5, 8 x 8K 111.7 vs 79.0; fp8 1 x 16K
// 26.9 vs 32.5, 8 x 2K 26.6 vs 32.0 (docs/PERF.md "Streaming decode attention"). 0: never.
// One sequence with a bf16 cache: from 4097 keys — in whole decode steps the streaming kernel
// wins there over the fused kernel's 32- / 64-key splits, unlike the op alone (H100, graph
// captured at the context, µs a step, fused -> streaming; docs/PERF.md "Session 39"):
// Qwen3-30B-A3B 6K / 8K / 12K 3714 / 3817 / 3969 -> 3411 / 3492 / 3674, Llama-3.1-8B 6K / 8K /
// 12K 5721 / 5857 / 6080 -> 5519 / 5609 / 5774 — but past the cluster plan's reach
// (decode_fused_plan.cu ClusterPlan: GQA groups 5-8, one sequence up to kClusterOneSeqMaxKeys),
// which at two ring stages beats it to 8K (session 40, Qwen3-30B-A3B, streaming -> cluster
// plan: graph at 6K / 8K 3446.8 / 3535.2 -> 3311.0 / 3443.3, 10K 3651.3 / 3628.0, 12K 3713.2 /
// 3740.6, 16K 3767.6 / 4066.2; the engine's 8192-key set at 4.5K / 6K / 8K 3409.5 / 3438.8 /
// 3528.0 -> 3242.7 / 3317.6 / 3444.5), and its counter form to 14K (sessions 41-42).
static int64_t StreamOneSeqMinKeys(const AttentionArgs& a) {
  return std::max<int64_t>(4096, DecodeFusedClusterMaxKeys(a, 1)) + 1;
}
bool DecodeStreamPreferred(const AttentionArgs& a, int num_seqs, int64_t max_len) {
  static const int env_keys = EnvInt("PG_DSTREAM_FUSED_MIN_KEYS", -1);
  const bool f8 = a.kv_type == KvType::kF8E4M3;
  const int64_t min_keys = env_keys >= 0 ? env_keys
                           : f8            ? 32768
                           : num_seqs == 1 ? StreamOneSeqMinKeys(a)
                                           : 16384;
  return min_keys > 0 && int64_t(num_seqs) * max_len >= min_keys && UseStream(a);
}

// The last split block may merge a row's splits itself when its partials are at most
// PG_DECODE_FUSED_COMBINE_KB (default 0: never; the combine kernel, which spreads the merge
// over (row, head) blocks, measured equal or faster in every shape on the H200: e.g. 1K x 32
// 64.0 vs 77.9 µs with a 64 KB bound, docs/PERF.md).
int64_t FusedCombineBytes() {
  static const int64_t bytes = int64_t(EnvInt("PG_DECODE_FUSED_COMBINE_KB", 0)) << 10;
  return bytes;
}

// The decode kernels' wave cap on a short sequence's splits (AttentionArgs::wave_splits).
void decode::SetWaveSplits(AttentionArgs& a, bool fused) {
  const auto [capacity, base] = ShapeOf(a, a.batch.num_seqs, fused);
  a.wave_splits = int(std::clamp<int64_t>(capacity / base, 1, kCombineMaxSplits));
}

// The combine kernel, where the splits were not merged inside the decode kernel (no counters).
static void LaunchCombineIfNeeded(const AttentionArgs& a, cudaStream_t stream) {
  if (a.num_splits > 1 && a.split_counters == nullptr)
    LaunchPdl(DecodeCombineKernel,
              dim3(unsigned(a.batch.num_tokens), unsigned(a.heads), unsigned(CombineParts(a))),
              dim3(unsigned(kCombineThreads)), 0, stream, a);
}

static std::atomic<int64_t> g_stream_fused_launches{0};
int64_t DecodeStreamFusedLaunches() { return g_stream_fused_launches.load(std::memory_order_relaxed); }

bool DecodeStreamFusedSupports(const AttentionArgs& a, const RopeKvWriteArgs& rope) {
  static const bool on = EnvFlag("PG_DSTREAM_FUSED", true);
  return on && StreamFusedSupports(a, rope);
}

// Default 25: Llama-3.1-8B at 1 x 32K, 4956 -> 4895 us a step (12 / 25 / 37 / 50 / 100 % all
// faster, 12-25 best; docs/PERF.md, session 27). A caller whose next op does not gain passes
// no hint (qwen3_moe.cpp).
static int& L2AfterPctRef() {
  static int pct = std::clamp(EnvInt("PEREGRINE_ATTN_L2_AFTER_PCT", 25), 0, 100);
  return pct;
}
int SetDecodeStreamL2AfterPct(int pct) {
  const int old = L2AfterPctRef();
  L2AfterPctRef() = std::clamp(pct, 0, 100);
  return old;
}
static std::atomic<int64_t> g_l2_after_launches{0};
int64_t DecodeStreamL2AfterLaunches() {
  return g_l2_after_launches.load(std::memory_order_relaxed);
}

// The hint AttentionArgs::l2_after as the process's percentage says (0: dropped), its slices
// the next GEMV's blocks (one an SM: gemv_ring.cu, fp8_ring_mma.cu).
static void SetL2After(AttentionArgs& a) {
  a.l2_after = MakeL2After(a.l2_after.ptr, a.l2_after.bytes, L2AfterPctRef());
  if (a.l2_after.ptr != nullptr) g_l2_after_launches.fetch_add(1, std::memory_order_relaxed);
}

// LaunchDecodeAttention's streaming branch with the fused kernel (the combine kernel merges).
void LaunchDecodeStreamFused(const AttentionArgs& args, const RopeKvWriteArgs& rope,
                             cudaStream_t stream) {
  if (args.batch.num_seqs == 0) return;
  AttentionArgs a = args;
  ApplyKnobs(a, /*stream=*/true);
  SetWaveSplits(a);
  SetL2After(a);
  a.split_counters = nullptr;
  g_stream_fused_launches.fetch_add(1, std::memory_order_relaxed);
  LaunchStreamFused(a, rope, a.batch.num_seqs, stream);
  LaunchCombineIfNeeded(a, stream);
}

void LaunchDecodeAttention(const AttentionArgs& args, cudaStream_t stream) {
  if (args.batch.num_seqs == 0) return;
  AttentionArgs a = args;
  const bool use_stream = UseStream(a);
  ApplyKnobs(a, use_stream);
  SetWaveSplits(a);
  const int group = a.heads / a.kv_heads;
  if (use_stream) {
    const int mergers = StreamMergers(a, a.batch.num_seqs);
    if (mergers == 0) a.split_counters = nullptr;  // the combine kernel merges
    LaunchStream(a, a.batch.num_seqs, mergers, stream);
  } else if (UseMma(a)) {
    const MmaShape sh = MmaLaunchShape(a);
    if (int64_t(a.num_splits) * sh.heads_per_block * a.head_dim * 4 > FusedCombineBytes())
      a.split_counters = nullptr;
    LaunchMma(a, a.batch.num_seqs, stream);
  } else {
    const int gp = HeadsPerBlock(group);
    if (int64_t(a.num_splits) * gp * a.head_dim * 4 > FusedCombineBytes()) a.split_counters = nullptr;
    const dim3 grid(unsigned(a.batch.num_seqs), unsigned(a.kv_heads * ((group + gp - 1) / gp)),
                    unsigned(a.num_splits));
    DoLaunch f{a, grid, stream};
    Dispatch(a.head_dim, group, a.kv_type, f);
  }
  LaunchCombineIfNeeded(a, stream);
}

int* DecodeSplitCounters(int64_t count, cudaStream_t stream) {
  // Outgrown buffers are kept (never freed): graphs captured earlier still point at them.
  thread_local int* counters = nullptr;
  thread_local int64_t capacity = 0;
  if (count <= capacity) return counters;
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(stream, &st);
  if (st != cudaStreamCaptureStatusNone) return nullptr;  // no allocation under capture
  const int64_t n = std::max<int64_t>(count, 1 << 16);
  int* p = nullptr;
  if (cudaMalloc(&p, size_t(n) * sizeof(int)) != cudaSuccess) return cudaGetLastError(), nullptr;
  if (cudaMemsetAsync(p, 0, size_t(n) * sizeof(int), stream) != cudaSuccess) return nullptr;
  counters = p, capacity = n;
  return counters;
}

}  // namespace pg::cuda
