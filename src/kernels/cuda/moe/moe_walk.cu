// Route-walking MoE experts for small batches (moe_params.h MoeWalkArgs): each slot's expert
// rows (routed or shared) are streamed once per slot (memory bound; no sorting, no host sync).
//   Kernel 1: one warp per (slot, pair of inter rows): gate and up dots over hidden,
//             SiLU * up -> act. Optionally prefetches its routed expert's down rows into L2,
//             so kernel 2 reads them from L2 while kernel 1 still streams gate / up. Its flat
//             form (GateUpFlatKernel, MoeWalkArgs::gu_flat) deals the same items to the warps
//             of at most one wave of blocks instead.
//   Kernel 2: one warp per (token, hidden row): down dots of the token's slots in order
//             q = 0..K-1, weighted sum, one store (atomic-free, deterministic).
// Both are PDL launches (pdl.cuh): kernel 1 may L2-prefetch the shared expert's rows (weights)
// before PdlWait; everything that reads ids / x / act waits.
// Self-routing (MoeWalkArgs::self_route): kernel 1's blocks route their token from the router
// logits (moe_route.cuh) instead of reading ids, and one block per token stores the routes
// that kernel 2 reads (after its PdlWait, i.e. after kernel 1 completed).
// Vector path: 16-byte weight loads (16 fp8 / 8 bf16 elements), when rows are multiples of a
// chunk and 16-byte aligned; otherwise an element loop.
#include <cstdint>

#include "core/env.h"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/moe/moe_device.cuh"
#include "kernels/cuda/moe/moe_route.cuh"

namespace pg::cuda {
namespace {

using moe::kChunk;

constexpr int kLine = 128;  // bytes per L2 prefetch

__device__ __forceinline__ void PrefetchL2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// Prefetches lines [first, first + count * stride) of [base, base + bytes), step `stride`.
__device__ __forceinline__ void PrefetchSpan(const char* base, int64_t bytes, int64_t first,
                                             int64_t stride) {
  for (int64_t off = first * kLine; off < bytes; off += stride * kLine) PrefetchL2(base + off);
}

// Lane's share of dot(w_row[0, cols), x[0, cols)), scalar path, scales applied.
template <bool kFp8, typename XT>
__device__ float RowDotScalar(const void* w_row, const XT* x, int cols, moe::RowScale rs,
                              int lane) {
  float acc = 0.0f;
  for (int i = lane; i < cols; i += 32) {
    float wv = moe::WeightAt<kFp8>(w_row, i);
    if (rs.blocks) wv *= __ldg(rs.blocks + (i >> 7));
    float xv;
    if constexpr (sizeof(XT) == 2) xv = __bfloat162float(x[i]);
    else xv = x[i];
    acc = fmaf(wv, xv, acc);
  }
  return acc * rs.row;
}

// A weight chunk of the flat grid's stream: not allocated in L1, so the x row its warps re-read
// for every row pair stays there whatever L1 / shared split the SM has (the per-slot grid keeps
// __ldcs: there the same load measured no faster, Qwen3-30B-A3B +1 to +4 us a step).
__device__ __forceinline__ uint4 LoadNoL1(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// Vector path of one (slot, pair of inter rows): the gate and up chunks of both rows loaded
// side by side (4 * U 16-byte loads in flight per lane), each x chunk read once for all four.
// Returns the lane's partial sums (gate0, up0, gate1, up1). Invariant: a lane adds its chunks
// lane, lane + 32, lane + 64, ... in that order whatever U is, so U changes no bit
// (GateUpUnroll picks U per grid; MoeExpertsOp.CudaFlatGateUpChangesNoBit compares 4 with 2).
template <bool kFp8, int U, bool kNoL1>
__device__ float4 GateUpVec(const uint4* const w4[4], const bf16* x, int nc,
                            const moe::RowScale rs[4], int lane) {
  constexpr int C = kChunk<kFp8>;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int c0 = lane; c0 < nc; c0 += 32 * U) {
    uint4 raw[U][4];
#pragma unroll
    for (int q = 0; q < U; ++q) {
      const int c = c0 + 32 * q;
      if (c < nc)
#pragma unroll
        for (int m = 0; m < 4; ++m) raw[q][m] = kNoL1 ? LoadNoL1(w4[m] + c) : __ldcs(w4[m] + c);
    }
#pragma unroll
    for (int q = 0; q < U; ++q) {
      const int c = c0 + 32 * q;
      if (c >= nc) break;
      float xf[C], wf[C];
      moe::LoadX<C>(x, c, xf);
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        moe::Widen<kFp8>(raw[q][m], wf);
        float part = 0.0f;
#pragma unroll
        for (int i = 0; i < C; ++i) part = fmaf(wf[i], xf[i], part);
        if (rs[m].blocks) part *= __ldg(rs[m].blocks + ((c * C) >> 7));
        acc[m] += part;
      }
    }
  }
  return make_float4(acc[0] * rs[0].row, acc[1] * rs[1].row, acc[2] * rs[2].row,
                     acc[3] * rs[3].row);
}

// Matrices of one slot, by value (taking the address of the kernel parameter would copy it to
// the stack): expert pointers, strides, and the slot's first gate / up row.
struct GuSlot {
  MoeExpertPtrs w{};  // w.gate null: empty route
  int64_t ld_gate = 0, ld_up = 0;
  int scale_ld = 0;
  int row0 = 0;
};
// e: the expert of routed slot q (ignored for shared slots).
__device__ __forceinline__ GuSlot GateUpSlot(const MoeWalkArgs& a, int q, int e) {
  GuSlot s;
  if (q < a.top_k) {
    if (e < 0 || e >= a.num_experts) return s;
    s.w = a.experts[e];
    s.ld_gate = a.layout.ld_gate, s.ld_up = a.layout.ld_up, s.scale_ld = a.layout.scale_ld_gu;
  } else {
    s.w = a.shared;
    s.ld_gate = a.shared_ld_gate, s.ld_up = a.shared_ld_up, s.scale_ld = a.shared_scale_ld_gu;
    s.row0 = (q - a.top_k) * a.inter;
  }
  return s;
}

// One work item of kernel 1: slot row r (slot s of its token), inter rows i0 and i0 + 1 (i0 <
// inter; an odd inter's last pair repeats its row): both rows' gate and up dots over hidden,
// SiLU(gate) * up stored to act. Every lane of the warp calls it. kNoL1: GateUpVec's weight loads.
template <bool kFp8, int U, bool kNoL1 = false>
__device__ __forceinline__ void GateUpPair(const MoeWalkArgs& a, const GuSlot& s, int64_t r,
                                           int i0, bool vec, int lane) {
  const int64_t t = r / (a.top_k + a.num_shared);
  const int64_t esz = kFp8 ? 1 : 2;
  const MoeWeightLayout& L = a.layout;
  const int i1 = i0 + 1 < a.inter ? i0 + 1 : i0;  // odd inter: the last pair repeats its row
  const int64_t g0 = s.row0 + i0, g1 = s.row0 + i1;  // rows of the slot's matrices
  const bf16* x = a.x + t * a.ldx;
  const char* rows[4] = {static_cast<const char*>(s.w.gate) + g0 * s.ld_gate * esz,
                         static_cast<const char*>(s.w.up) + g0 * s.ld_up * esz,
                         static_cast<const char*>(s.w.gate) + g1 * s.ld_gate * esz,
                         static_cast<const char*>(s.w.up) + g1 * s.ld_up * esz};
  const moe::RowScale rs[4] = {moe::ScaleOfRow(s.w.gate_scale, L.scale_mode, s.scale_ld, g0),
                               moe::ScaleOfRow(s.w.up_scale, L.scale_mode, s.scale_ld, g0),
                               moe::ScaleOfRow(s.w.gate_scale, L.scale_mode, s.scale_ld, g1),
                               moe::ScaleOfRow(s.w.up_scale, L.scale_mode, s.scale_ld, g1)};
  float v[4];
  if (vec) {
    const uint4* w4[4];
#pragma unroll
    for (int m = 0; m < 4; ++m) w4[m] = reinterpret_cast<const uint4*>(rows[m]);
    const float4 p = GateUpVec<kFp8, U, kNoL1>(w4, x, a.hidden / kChunk<kFp8>, rs, lane);
    v[0] = p.x, v[1] = p.y, v[2] = p.z, v[3] = p.w;
  } else {
#pragma unroll
    for (int m = 0; m < 4; ++m) v[m] = RowDotScalar<kFp8>(rows[m], x, a.hidden, rs[m], lane);
  }
#pragma unroll
  for (int m = 0; m < 4; ++m) v[m] = moe::WarpSum(v[m]);
  if (lane == 0) {
    a.act[r * a.inter + i0] = moe::Silu(v[0]) * v[1];
    if (i1 != i0) a.act[r * a.inter + i1] = moe::Silu(v[2]) * v[3];
  }
}

// Shared slot q's pair of inter rows i0, i0 + 1 (gate and up) into L2: weights, known before
// the upstream kernel finishes (called before PdlWait).
template <bool kFp8>
__device__ __forceinline__ void PrefetchSharedPair(const MoeWalkArgs& a, int q, int i0, int lane) {
  const int64_t esz = kFp8 ? 1 : 2;
  const GuSlot s = GateUpSlot(a, q, -1);
  const int rows = i0 + 1 < a.inter ? 2 : 1;
  const int64_t row_bytes = int64_t(a.hidden) * esz;
  for (int m = 0; m < rows; ++m) {
    const int64_t row = s.row0 + i0 + m;
    PrefetchSpan(static_cast<const char*>(s.w.gate) + row * s.ld_gate * esz, row_bytes, lane, 32);
    PrefetchSpan(static_cast<const char*>(s.w.up) + row * s.ld_up * esz, row_bytes, lane, 32);
  }
}

// One warp per (slot r = t * K + q, pair of inter rows i0 = 2p, i1 = 2p + 1).
// Occupancy: <= 80 registers at U = 2 (3 blocks of 8 warps per SM: a Qwen3-30B-A3B token's 8
// routes x 48 blocks fit in one wave on 132 SMs).
template <bool kFp8, int U, int kWarps>
__global__ void __launch_bounds__(kWarps * 32, (U == 2 ? 24 : 16) / kWarps) GateUpKernel(MoeWalkArgs a, bool vec) {
  PG_BLOCK_TRACE(kTraceGateUp);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int K = a.top_k + a.num_shared;
  const int64_t r = blockIdx.y;  // slot row
  const int64_t t = r / K;
  const int q = int(r % K);
  const int wi = blockIdx.x * kWarps + warp;  // warp index within the slot
  const int i0 = 2 * wi;
  const int64_t esz = kFp8 ? 1 : 2;
  if (q >= a.top_k && i0 < a.inter) PrefetchSharedPair<kFp8>(a, q, i0, lane);
  PdlWait();  // ids and x come from upstream kernels; act is read by the previous walk
  PdlTrigger();
  int e = -1;
  if (q < a.top_k) {
    if (a.self_route) {
      // Every block routes its token (one warp; the same result in every block); the first
      // block of slot 0 stores the routes for kernel 2.
      __shared__ int s_id[32];
      __shared__ float s_choice[32 * moe::kRoutePerLane];
      if (warp == 0) {
        int id;
        float w;
        moe::RouteWarp(a.route, t, s_choice, lane, &id, &w);
        if (lane < a.top_k) {
          s_id[lane] = id;
          if (blockIdx.x == 0 && q == 0) {
            a.route.topk_ids[t * a.top_k + lane] = id;
            a.route.topk_weights[t * a.route.weights_stride + lane] = w;
          }
        }
      }
      __syncthreads();
      e = s_id[q];
    } else {
      e = a.ids[t * a.top_k + q];
    }
  }
  const GuSlot s = GateUpSlot(a, q, e);
  if (!s.w.gate) return;
  const MoeWeightLayout& L = a.layout;
  if (a.prefetch_down) {
    // This slot's share of its down rows into L2 (routed: the expert's whole down matrix;
    // shared slot s: its part of the lines of the shared down matrix).
    const int warps = gridDim.x * kWarps;
    if (q < a.top_k) {
      PrefetchSpan(static_cast<const char*>(s.w.down), int64_t(a.hidden) * L.ld_down * esz,
                   int64_t(wi) * 32 + lane, int64_t(warps) * 32);
    } else {
      const int64_t bytes = int64_t(a.hidden) * a.shared_ld_down * esz;
      const int64_t lines = (bytes + kLine - 1) / kLine, S = a.num_shared, sq = q - a.top_k;
      const int64_t lo = lines * sq / S, hi = lines * (sq + 1) / S;
      PrefetchSpan(static_cast<const char*>(s.w.down), hi * kLine < bytes ? hi * kLine : bytes,
                   lo + int64_t(wi) * 32 + lane, int64_t(warps) * 32);
    }
  }
  if (i0 >= a.inter) return;
  GateUpPair<kFp8, U>(a, s, r, i0, vec, lane);
}

// Kernel 1 over a grid of at most one wave (B blocks, B <= the blocks that fit on the GPU at
// once, or MoeWalkArgs::gu_flat_per_sm an SM). Items are (slot row r, pair p), numbered i = r * P + p
// (P = ceil(inter / 2)). Block b takes the contiguous range [b * items / B, (b + 1) * items / B)
// (floor or ceil(items / B) items: the SMs stream equal shares to the end, where the one-block-
// per-slot grid leaves a second, partial wave — DeepSeek-V2-Lite's 8 x 88 blocks), its warp w
// items lo + w + kWarps * j, j = 0, 1, ...: a round of the block's warps reads consecutive row
// pairs of one expert, as the per-slot grid's blocks do (session 34's strided deal, warp w of
// block b taking items b + B * (w + kWarps * j), gained less: H100, DeepSeek-V2-Lite 1 x 1K
// -20.8 against -49.5 us a step; docs/PERF.md "Session 35"). Each item computes what
// GateUpKernel's warp for it does, in the same order: the same act bits. Not for self_route or
// prefetch_down (their blocks are per slot).
template <bool kFp8, int U, int kWarps>
__global__ void __launch_bounds__(kWarps * 32, (U == 2 ? 24 : 16) / kWarps) GateUpFlatKernel(MoeWalkArgs a, bool vec) {
  PG_BLOCK_TRACE(kTraceGateUp);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int K = a.top_k + a.num_shared;
  const int P = (a.inter + 1) / 2;
  const int items = int(a.num_tokens) * K * P;  // <= INT32_MAX: LaunchGateUp checks
  const int lo = int(int64_t(items) * blockIdx.x / gridDim.x);
  const int hi = int(int64_t(items) * (blockIdx.x + 1) / gridDim.x);
  // This warp's j-th item.
  auto item = [&](int j) { return lo + warp + kWarps * j; };
  if (a.num_shared > 0)
    for (int j = 0, i = item(0); i < hi; i = item(++j)) {
      const int q = (i / P) % K;
      if (q >= a.top_k) PrefetchSharedPair<kFp8>(a, q, 2 * (i % P), lane);
    }
  PdlWait();  // ids and x come from upstream kernels; act is read by the previous walk
  PdlTrigger();
#pragma unroll 1
  for (int j = 0, i = item(0); i < hi; i = item(++j)) {
    const int r = i / P, t = r / K, q = r % K;
    const GuSlot s = GateUpSlot(a, q, q < a.top_k ? a.ids[t * a.top_k + q] : -1);
    if (s.w.gate) GateUpPair<kFp8, U, /*kNoL1=*/true>(a, s, r, 2 * (i % P), vec, lane);
  }
}

// One warp per (token t, hidden row o). Lane q < K describes slot q (row pointer, weight
// times row scale, block scales, act row); the vector path walks the chunks of all valid
// slots as one flat sequence (slot-major), kU loads in flight per lane, so short rows
// (small inter) still keep the memory system busy. Order of the sums is fixed: deterministic.
template <bool kFp8, int kU, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) DownKernel(MoeWalkArgs a, bool vec) {
  PG_BLOCK_TRACE(kTraceDown);
  constexpr int C = kChunk<kFp8>;
  PdlWait();  // ids, weights and act come from upstream kernels
  PdlTrigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = blockIdx.y;
  const int o = blockIdx.x * kWarps + warp;
  if (o >= a.hidden) return;
  // accumulate: the output's value (the residual stream), loaded now rather than after the dot.
  const float prev = a.accumulate && lane == 0 ? __bfloat162float(a.out[t * a.ldo + o]) : 0.0f;
  const MoeWeightLayout& L = a.layout;
  const int K = a.top_k + a.num_shared;
  const int64_t esz = kFp8 ? 1 : 2;
  // Slot `lane` of this token.
  const char* row = nullptr;
  const float* act = nullptr;
  float wj = 0.0f;
  moe::RowScale rs;
  if (lane < K) {
    const int64_t r = t * K + lane;
    if (lane < a.top_k) {
      const int e = a.ids[t * a.top_k + lane];
      if (e >= 0 && e < a.num_experts) {
        const MoeExpertPtrs& w = a.experts[e];
        row = static_cast<const char*>(w.down) + int64_t(o) * L.ld_down * esz;
        rs = moe::ScaleOfRow(w.down_scale, L.scale_mode, L.scale_ld_down, o);
        wj = a.weights[t * a.ldw_route + lane] * rs.row;
      }
    } else {
      // Shared slot s: columns [s * inter, (s + 1) * inter) of the shared down row (the host
      // checks s * inter % 128 == 0 for block scales).
      const int64_t col0 = int64_t(lane - a.top_k) * a.inter;
      row = static_cast<const char*>(a.shared.down) + (int64_t(o) * a.shared_ld_down + col0) * esz;
      rs = moe::ScaleOfRow(a.shared.down_scale, L.scale_mode, a.shared_scale_ld_down, o);
      if (rs.blocks) rs.blocks += col0 >> 7;
      wj = rs.row;
    }
    if (row) act = a.act + r * a.inter;
  }
  float acc = 0.0f;
  if (vec) {
    const unsigned valid = __ballot_sync(0xffffffffu, row != nullptr);
    const int nvalid = __popc(valid);
    const int nc = a.inter / C, total = nvalid * nc;
    // Compacted: lane m (< nvalid) holds the m-th valid slot's fields (one __fns per lane here,
    // not one per chunk in the loop).
    {
      const int src = lane < nvalid ? int(__fns(valid, 0, lane + 1)) : 0;
      row = reinterpret_cast<const char*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(row), src));
      act = reinterpret_cast<const float*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(act), src));
      rs.blocks = reinterpret_cast<const float*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(rs.blocks), src));
      wj = __shfl_sync(0xffffffffu, wj, src);
    }
    for (int base = 0; base < total; base += 32 * kU) {
      uint4 raw[kU];
      const float* xs[kU];
      const float* blk[kU];
      float wq[kU];
      int cq[kU];
#pragma unroll
      for (int q = 0; q < kU; ++q) {
        const int idx = base + 32 * q + lane;
        const int src = idx < total ? idx / nc : 0;  // compacted slot m
        const auto* rp = reinterpret_cast<const char*>(
            __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(row), src));
        xs[q] = reinterpret_cast<const float*>(
            __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(act), src));
        blk[q] = reinterpret_cast<const float*>(
            __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(rs.blocks), src));
        wq[q] = __shfl_sync(0xffffffffu, wj, src);
        cq[q] = idx < total ? idx - src * nc : -1;
        if (cq[q] >= 0) raw[q] = __ldcs(reinterpret_cast<const uint4*>(rp) + cq[q]);
      }
#pragma unroll
      for (int q = 0; q < kU; ++q) {
        if (cq[q] < 0) continue;
        float wf[C], xf[C];
        moe::Widen<kFp8>(raw[q], wf);
        moe::LoadX<C>(xs[q], cq[q], xf);
        float part = 0.0f;
#pragma unroll
        for (int i = 0; i < C; ++i) part = fmaf(wf[i], xf[i], part);
        if (blk[q]) part *= __ldg(blk[q] + ((cq[q] * C) >> 7));
        acc = fmaf(wq[q], part, acc);
      }
    }
    acc = moe::WarpSum(acc);
  } else {
    for (int j = 0; j < K; ++j) {
      const char* rp = reinterpret_cast<const char*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(row), j));
      const float* xp = reinterpret_cast<const float*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(act), j));
      moe::RowScale sj;
      sj.blocks = reinterpret_cast<const float*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(rs.blocks), j));
      const float wjj = __shfl_sync(0xffffffffu, wj, j);
      if (!rp) continue;
      acc = fmaf(wjj, moe::WarpSum(RowDotScalar<kFp8>(rp, xp, a.inter, sj, lane)), acc);
    }
  }
  if (lane == 0) {
    if (a.accumulate) acc += prev;
    a.out[t * a.ldo + o] = __float2bfloat16_rn(acc);
  }
}

// Kernel 1's flat grid (GateUpFlatKernel) when a.gu_flat asks for it — 1: one token, bf16
// experts, and the slot-per-block grid g1 more than one wave of U-unrolled blocks; 2: always:
// its blocks (at most one wave), or 0 where GateUpKernel runs over g1.
template <bool kFp8, int U, int kWarps>
unsigned FlatGateUpBlocks(const MoeWalkArgs& a, dim3 g1) {
  const int64_t items = a.num_tokens * (a.top_k + a.num_shared) * ((a.inter + 1) / 2);
  if (a.gu_flat <= 0 || a.self_route || a.prefetch_down || items > INT32_MAX) return 0;
  static const int per_sm = [] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, GateUpFlatKernel<kFp8, U, kWarps>,
                                                      kWarps * 32, 0) != cudaSuccess || n < 1)
      n = 1;
    return n;
  }();
  const int cap = a.gu_flat_per_sm > 0 && a.gu_flat_per_sm < per_sm ? a.gu_flat_per_sm : per_sm;
  const int64_t wave = int64_t(cap) * MultiprocessorCount();
  const int64_t blocks = int64_t(g1.x) * g1.y;
  if (a.gu_flat < 2 && !(blocks > wave && a.num_tokens == 1 && !kFp8)) return 0;
  return unsigned(blocks < wave ? blocks : wave);
}

// The gate/up kernels ask for the largest L1 (shared carveout 0 %; PEREGRINE_MOE_GU_CARVEOUT,
// percent, -1 = the driver's choice): their warps re-read the token's x row through L1 for every
// row pair, and an SM keeps the L1 / shared split it last drained with until it drains again
// (the ring kernels ask for the largest shared part, ~28 KB of L1). H100, 1 x 1K, three rounds
// (docs/PERF.md "Session 38", s38l): Qwen3-30B-A3B -19.3 us a step (-20.7 in s38k), DeepSeek-V2-Lite
// -8.2, Moonlight -2.8, DeepSeek-V3's fp8 shape -5.8; batches 8 / 32 equal; the largest shared part
// instead: +58 / +83 (s38k); the same for the down kernel lost (+96 to +104).
template <bool kFp8, int U, int kWarps>
void LaunchGateUp(const MoeWalkArgs& a, bool vec, dim3 g1, cudaStream_t stream) {
  static const bool carved = [] {  // once per instantiation
    const int carve = EnvInt("PEREGRINE_MOE_GU_CARVEOUT", 0);
    if (carve >= 0)
      for (auto* k : {GateUpFlatKernel<kFp8, U, kWarps>, GateUpKernel<kFp8, U, kWarps>})
        (void)cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, carve);
    return true;
  }();
  (void)carved;
  if (const unsigned b = FlatGateUpBlocks<kFp8, U, kWarps>(a, g1)) {
    (void)LaunchPdl(GateUpFlatKernel<kFp8, U, kWarps>, dim3(b), dim3(kWarps * 32), 0, stream, a, vec);
    return;
  }
  (void)LaunchPdl(GateUpKernel<kFp8, U, kWarps>, g1, dim3(kWarps * 32), 0, stream, a, vec);
}

// a.gu_unroll 0 (auto): 4 loads in flight for fp8 experts; for bf16, 4 where the one-token grid
// goes flat at 2 (fewer, longer-streaming blocks), else 2. H100, 1 x 1K, three interleaved rounds
// (docs/PERF.md "Session 37"): DeepSeek-V2-Lite -27.5, Moonlight-16B-A3B -16.3 us a step; the
// per-slot grid at 4 lost (Qwen3-30B-A3B +132), as did 4 on Qwen3's flat grid (+59).
template <bool kFp8, int kWarps>
int GateUpUnroll(const MoeWalkArgs& a, dim3 g1) {
  if (a.gu_unroll != 0) return a.gu_unroll;
  if (kFp8) return 4;
  return a.num_tokens == 1 && FlatGateUpBlocks<kFp8, 2, kWarps>(a, g1) > 0 ? 4 : 2;
}

template <bool kFp8, int kWarps>
void LaunchWarps(const MoeWalkArgs& a, bool vec, cudaStream_t stream) {
  const int K = a.top_k + a.num_shared;
  const dim3 g1(unsigned((a.inter + 2 * kWarps - 1) / (2 * kWarps)), unsigned(a.num_tokens * K));
  const dim3 g2(unsigned((a.hidden + kWarps - 1) / kWarps), unsigned(a.num_tokens));
  const dim3 block(kWarps * 32);
  if (a.phases & 1) {
    if (GateUpUnroll<kFp8, kWarps>(a, g1) >= 4) LaunchGateUp<kFp8, 4, kWarps>(a, vec, g1, stream);
    else LaunchGateUp<kFp8, 2, kWarps>(a, vec, g1, stream);
  }
  if (a.phases & 2) {
    if (vec && a.down_rows >= 2) LaunchMoeWalkDownTiled(a, stream);
    else if (a.down_unroll >= 8) (void)LaunchPdl(DownKernel<kFp8, 8, kWarps>, g2, block, 0, stream, a, vec);
    else (void)LaunchPdl(DownKernel<kFp8, 4, kWarps>, g2, block, 0, stream, a, vec);
  }
  // Launch errors: the caller checks cudaGetLastError (PG_CUDA_CHECK_LAUNCH).
}

template <bool kFp8>
void Launch(const MoeWalkArgs& a, cudaStream_t stream) {
  constexpr int C = kChunk<kFp8>;
  const int64_t esz = kFp8 ? 1 : 2;
  // Vector path: whole 16-byte chunks on every row, aligned bases and strides.
  auto aligned = [](int64_t ld_bytes) { return ld_bytes % 16 == 0; };
  bool vec = a.layout.aligned16 && a.hidden % C == 0 && a.inter % C == 0 && aligned(a.ldx * 2) &&
             aligned(a.layout.ld_gate * esz) && aligned(a.layout.ld_up * esz) &&
             aligned(a.layout.ld_down * esz) && (reinterpret_cast<uintptr_t>(a.x) & 15) == 0 &&
             (int64_t(a.inter) * 4) % 16 == 0;
  if (a.num_shared > 0)
    vec = vec && aligned(a.shared_ld_gate * esz) && aligned(a.shared_ld_up * esz) &&
          aligned(a.shared_ld_down * esz);
  if (a.warps == 4) LaunchWarps<kFp8, 4>(a, vec, stream);
  else LaunchWarps<kFp8, 8>(a, vec, stream);
}

}  // namespace

void LaunchMoeWalk(const MoeWalkArgs& a, cudaStream_t stream) {
  // Chunks of tokens keep grid.y (slots) within 65535; act is reused by each chunk in turn.
  const int K = a.top_k + a.num_shared;
  if (K == 0) return;
  const int64_t chunk = 65535 / K;
  for (int64_t t0 = 0; t0 < a.num_tokens; t0 += chunk) {
    MoeWalkArgs c = a;
    c.num_tokens = a.num_tokens - t0 < chunk ? a.num_tokens - t0 : chunk;
    c.x += t0 * a.ldx;
    if (a.top_k > 0) {
      c.ids += t0 * a.top_k;
      c.weights += t0 * a.ldw_route;
    }
    if (a.self_route) {
      const size_t esz = a.route.logits_bf16 ? 2 : 4;
      c.route.logits = static_cast<const char*>(a.route.logits) + size_t(t0 * a.route.logits_stride) * esz;
      c.route.topk_ids += t0 * a.top_k;
      c.route.topk_weights += t0 * a.route.weights_stride;
    }
    c.out += t0 * a.ldo;
    if (a.layout.fp8) Launch<true>(c, stream);
    else Launch<false>(c, stream);
  }
}

}  // namespace pg::cuda
