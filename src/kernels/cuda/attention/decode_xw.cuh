// The fused decode attention's exchange form (decode_attention_mma.cu DecodeMmaKernel with kXw;
// AttentionArgs-level switch: decode_fused.h SetDecodeFusedXwMode): for a small-variant split
// whose every 16-key tile sits in the block's rings at once (tiles <= tile warps x ring stages),
// the warps exchange the softmax instead of merging their outputs.
//   1. Each tile warp computes S = Q · K^T of its own tiles (K is in its thread-private layout)
//      and publishes its row maxima; one barrier.
//   2. Every warp takes the block's row maxima (with the new token's logit in the owner
//      block), turns its scores into p = 2^(s - m), publishes its P tiles (the PV MMA's A
//      fragments, as each lane holds them) and its row sums; one barrier.
//   3. Warp w computes O[:, w D / 4 .. (w + 1) D / 4) = P · V over every tile of the split (V
//      through ldmatrix.trans from the tile's ring stage, any warp's), adds the new token, and
//      stores its quarter of the split's partial directly.
// Against the round-robin loop it replaces the online rescales and the warps' merge through
// shared memory ([4][rows][D] floats written, a barrier, 4 loads and 4 exponentials an output)
// by two barriers over 16 maxima / sums a warp and 2 KB of P. Same m / l / o meaning as
// MergeWarpsAndStore's outputs (maxima in log2 units, o unnormalised), so the split merges
// (ClusterMergeSplits, FusedFinishSplits) are shared; sums differ from the loop's by f32
// rounding only (the same p, added in another order).
// With the cluster merge the partial goes on as the loop's does (PG_FUSED_XW=1), straight from
// registers into the owners' inboxes (xw_push, 2), or as st.async counted on a transaction
// barrier in each owner, which then waits for its own bytes only: no cluster barrier after the
// push (xw_async, 3).
// bf16 caches only (the P and V products in bf16, as the loop's).
#pragma once

#include <cuda_bf16.h>

#include "kernels/cuda/attention/decode_common.cuh"
#include "kernels/cuda/attention/decode_fused.cuh"
#include "kernels/cuda/attention/decode_mma_util.cuh"
#include "kernels/cuda/common/bulk_copy.cuh"

namespace pg::cuda::decode {

// Shared memory of the exchange past the new token's scratch: [kWarps][16] row maxima,
// [kWarps][16] row sums (log2 units / weights), then [tiles][32 lanes] P fragments (uint4).
__host__ __device__ constexpr int XwBytes(int max_tiles) {
  return 2 * kWarps * 16 * 4 + max_tiles * 32 * 16;
}

// One split block's state entering the exchange (after the new token's preparation; every
// value block-uniform but the lane's own).
struct XwSplit {
  int row, h0, group, split, active;      // query row, first q head, GQA group (<= 16), split, active splits
  int begin, kv_end, tiles, my_tiles;     // cache keys [begin, kv_end); tiles of the block / of this warp
  bool owner;                             // this split holds the new token (its logit / v in the scratch)
  float qscale;                           // logit scale in log2 units
};

// The asynchronous push (AttentionArgs::xw_async): each block's transaction barrier sits right
// past its inbox (8-byte aligned: ClusterInboxBytes is a multiple of 64), at a byte offset of
// the block's dynamic shared memory; the launcher adds kXwAsyncBarBytes to the inbox.
constexpr int kXwAsyncBarBytes = 16;
__device__ __forceinline__ uint32_t XwAsyncBar(const AttentionArgs& a, int ng) {
  extern __shared__ uint4 smem_base[];
  return bulk::SmemAddr(reinterpret_cast<const char*>(smem_base) + a.cluster_inbox +
                        ClusterInboxBytes(ng, a.head_dim));
}
// Bytes owner r of `active` receives: every split's items of r's share, and every split's
// (max, sum) of the ng rows.
__device__ __forceinline__ uint32_t XwAsyncOwnerBytes(int ng, int D, int active, int r) {
  const int items = ng * D, P = MergeShare(items, active);
  const int mine = max(0, min(P, items - r * P));
  return uint32_t(active) * uint32_t(mine + 2 * ng) * 4u;
}
// At the kernel's start, before ClusterMergeStart (whose barrier phase every pusher waits for
// before its first store, so the barrier is initialised before any store counts on it): thread
// 0 initialises the block's barrier and, in an owner of a merge (active > 1, rank < active),
// arrives with the bytes it will receive. A phase that never completes (no owner) is never
// waited on.
__device__ __forceinline__ void XwAsyncInit(const AttentionArgs& a, int ng, int active, int rank) {
  if (threadIdx.x != 0) return;
  const uint32_t bar = XwAsyncBar(a, ng);
  bulk::MbarInit(bar, 1);
  if (active > 1 && rank < active) bulk::MbarArriveExpectTx(bar, XwAsyncOwnerBytes(ng, a.head_dim, active, rank));
  bulk::FenceMbarInit();
}
// An owner's wait for every split's partial (all threads). A phase that is not done after ~2 s
// means the pushes and the expected bytes disagree: trap (a failed launch) instead of hanging.
__device__ __forceinline__ void XwAsyncOwnerWait(const AttentionArgs& a, int ng) {
  const uint32_t bar = XwAsyncBar(a, ng);
  const long long t0 = clock64();
  while (!bulk::MbarTryWait(bar, 0))
    if (clock64() - t0 > (1ll << 32)) __trap();
}

// The cluster merge's push from registers (AttentionArgs::xw_push; after barrier.cluster.wait,
// with more than one active split): the lane's values of rows g and g + 8 (< group) over this
// warp's dims (n-blocks nb0 + q) go straight into their owners' inboxes in
// ClusterMergeSplits' layout, and the row maxima / sums to owner r = 4 warp + t (every owner
// gets every row: active <= kMaxClusterSplits = 16 = 4 warps x 4 lanes of a quad).
template <int D, int kN>
__device__ __forceinline__ void XwPush(const AttentionArgs& a, const XwSplit& sp, int nb0, float m0,
                                       float m1, float l0, float l1, const float (&o)[kN][4]) {
  namespace cg = cooperative_groups;
  cg::cluster_group cl = cg::this_cluster();
  extern __shared__ uint4 smem_base[];
  float* inbox = reinterpret_cast<float*>(reinterpret_cast<char*>(smem_base) + a.cluster_inbox);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int items = sp.group * D, P = MergeShare(items, sp.active);
  const int owner = warp * 4 + t;
  const bool async = a.xw_async;  // block-uniform
  const uint32_t bar = async ? XwAsyncBar(a, sp.group) : 0u;
  // One value (two: v2, 8-byte aligned) into owner r's inbox at float offset off.
  auto put = [&](int r, int off, float v0, float v1, bool two) {
    if (async) {
      const uint32_t dst = bulk::MapaCluster(bulk::SmemAddr(inbox + off), r);
      const uint32_t rbar = bulk::MapaCluster(bar, r);
      if (two) bulk::StAsync2(dst, v0, v1, rbar);
      else bulk::StAsync(dst, v0, rbar);
    } else {
      float* p = cl.map_shared_rank(inbox + off, r);
      p[0] = v0;
      if (two) p[1] = v1;
    }
  };
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int rr = g + 8 * hr;
    if (rr >= sp.group) continue;
#pragma unroll
    for (int q = 0; q < kN; ++q) {
      const int idx = rr * D + (nb0 + q) * 8 + 2 * t;
      const InboxSlot s0 = InboxItem(idx, P, sp.split), s1 = InboxItem(idx + 1, P, sp.split);
      // Both dims with one owner (where P is even), in one 8-byte store where aligned.
      if (s1.r == s0.r && s0.off % 2 == 0) {
        put(s0.r, s0.off, o[q][2 * hr], o[q][2 * hr + 1], true);
      } else {
        put(s0.r, s0.off, o[q][2 * hr], 0.0f, false);
        put(s1.r, s1.off, o[q][2 * hr + 1], 0.0f, false);
      }
    }
    if (owner < sp.active) put(owner, InboxMl(items, sp.group, sp.split, rr), hr ? m1 : m0, hr ? l1 : l0, true);
  }
}

// The exchange (steps 1-3 above) and the store; every thread of the block calls it. M: the
// kernel's geometry (MmaGeo: kStageU4 / kWarpU4 uint4 a stage / warp ring, kKU4 K part, kNvt,
// kCpv, kKc, kNb); kSt stages a warp, kTW tile warps (warp w's tile i is the split's tile
// w + i kTW, in stage i of warp w's ring). Requires sp.tiles <= kTW * kSt (the caller falls
// back to the loop otherwise) and every warp's tiles issued (cp.async) by this thread's warp.
// smem: the block's rings (warp w's at w * kWarpU4); xw: XwBytes(kTW * kSt) of shared memory
// that nothing else uses before the final barrier; part: the cluster partial or null. Ends
// with every store issued; part (if any) is complete after the caller's next __syncthreads.
// With part and a.xw_push it has passed barrier.cluster.wait and pushed (more than one active
// split): the caller goes on from the merge's second phase (ClusterMergeBarrier, or with
// xw_async the owner's own barrier), not from ClusterMergePush.
template <class M, int D, int kSt, int kTW>
__device__ __forceinline__ void XwSplitAndStore(const AttentionArgs& a, const XwSplit& sp,
                                                const uint32_t (&qa)[M::kKc][4], const uint4* smem,
                                                const FusedScratch<D>& fs, float* xw, float* part) {
  constexpr int kNbW = M::kNb / kWarps;  // 8-dim n-blocks of a warp's output slice
  static_assert(M::kNb % (2 * kWarps) == 0, "a warp's slice is whole n-block pairs");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  float* xmax = xw;                  // [kWarps][16]
  float* xsum = xw + kWarps * 16;    // [kWarps][16]
  uint4* xp = reinterpret_cast<uint4*>(xw + 2 * kWarps * 16);  // [tiles][32]
  CpAsyncWait<0>();  // this warp's tiles landed (visible to the block after the barrier)
  PG_TRACE_MARK(3);
  // 1. S of this warp's tiles, masked (-inf past kv_end and for tiles it does not have).
  float s[kSt][2][4];
  float mx0 = -INFINITY, mx1 = -INFINITY;
  const uint4* ring = smem + warp * M::kWarpU4;
#pragma unroll
  for (int i = 0; i < kSt; ++i) {
    const bool have = i < sp.my_tiles;  // warp-uniform
    if (have) QkTile<false, M::kNvt, M::kCpv, M::kKc>(s[i], ring + i * M::kStageU4, qa, lane);
    const int key0 = sp.begin + (warp + i * kTW) * kSplitGranule;
#pragma unroll
    for (int bb = 0; bb < 2; ++bb)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[i][bb][e] = have && key0 + bb * 8 + 2 * t + (e & 1) < sp.kv_end ? s[i][bb][e] * sp.qscale : -INFINITY;
    mx0 = fmaxf(mx0, fmaxf(fmaxf(s[i][0][0], s[i][0][1]), fmaxf(s[i][1][0], s[i][1][1])));
    mx1 = fmaxf(mx1, fmaxf(fmaxf(s[i][0][2], s[i][0][3]), fmaxf(s[i][1][2], s[i][1][3])));
  }
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {  // the quad holds the rows' keys
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
  }
  if (t == 0) xmax[warp * 16 + g] = mx0, xmax[warp * 16 + g + 8] = mx1;
  __syncthreads();
  // 2. The block's row maxima, the new token's logit included; p, row sums, P published.
  const float sn0 = sp.owner && g < sp.group ? fs.score[g] : -INFINITY;
  const float sn1 = sp.owner && g + 8 < sp.group ? fs.score[g + 8] : -INFINITY;
  float m0 = sn0, m1 = sn1;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m0 = fmaxf(m0, xmax[w * 16 + g]), m1 = fmaxf(m1, xmax[w * 16 + g + 8]);
  float l0 = 0.0f, l1 = 0.0f;
#pragma unroll
  for (int i = 0; i < kSt; ++i) {
    if (i >= sp.my_tiles) break;  // warp-uniform
    float (&p)[2][4] = s[i];
#pragma unroll
    for (int bb = 0; bb < 2; ++bb) {
      p[bb][0] = Exp2Or0(p[bb][0], m0), p[bb][1] = Exp2Or0(p[bb][1], m0);
      p[bb][2] = Exp2Or0(p[bb][2], m1), p[bb][3] = Exp2Or0(p[bb][3], m1);
      l0 += p[bb][0] + p[bb][1], l1 += p[bb][2] + p[bb][3];
    }
    xp[(warp + i * kTW) * 32 + lane] =
        make_uint4(mla::PackBf16(p[0][0], p[0][1]), mla::PackBf16(p[0][2], p[0][3]),
                   mla::PackBf16(p[1][0], p[1][1]), mla::PackBf16(p[1][2], p[1][3]));
  }
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, off);
    l1 += __shfl_xor_sync(0xffffffffu, l1, off);
  }
  if (t == 0) xsum[warp * 16 + g] = l0, xsum[warp * 16 + g + 8] = l1;
  __syncthreads();  // P, the sums and every warp's V tiles visible
  // 3. This warp's dims over every tile, then the new token (p = 2^(s_new - m), v from the
  // scratch) and the block's row sums.
  float o[kNbW][4];
#pragma unroll
  for (int q = 0; q < kNbW; ++q) o[q][0] = o[q][1] = o[q][2] = o[q][3] = 0.0f;
#pragma unroll
  for (int j = 0; j < kTW * kSt; ++j) {
    if (j >= sp.tiles) break;  // block-uniform
    const uint4 pv = xp[j * 32 + lane];
    const uint32_t pa[4] = {pv.x, pv.y, pv.z, pv.w};
    const uint4* sv = smem + (j % kTW) * M::kWarpU4 + (j / kTW) * M::kStageU4 + M::kKU4;
    PvTile<false, M::kNb, kNbW>(o, pa, sv, warp * kNbW / 2, lane);
  }
  l0 = 0.0f, l1 = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) l0 += xsum[w * 16 + g], l1 += xsum[w * 16 + g + 8];
  if (sp.owner) {
    const float p0 = Exp2Or0(sn0, m0), p1 = Exp2Or0(sn1, m1);
    l0 += p0, l1 += p1;
#pragma unroll
    for (int q = 0; q < kNbW; ++q) {
      const int e = (warp * kNbW + q) * 8 + 2 * t;
      o[q][0] += p0 * fs.v[e], o[q][1] += p0 * fs.v[e + 1];
      o[q][2] += p1 * fs.v[e], o[q][3] += p1 * fs.v[e + 1];
    }
  }
  if (a.pdl_late_trigger) PdlTrigger();
  PG_TRACE_MARK(1);  // the split's keys done
  const bool push = part != nullptr && a.xw_push;  // block-uniform
  if (push) {
    asm volatile("barrier.cluster.wait;" ::: "memory");  // every block of the cluster has started
    if (sp.active > 1) return XwPush<D, kNbW>(a, sp, warp * kNbW, m0, m1, l0, l1, o);
  }
  // The cluster partial overlays the rings: every warp's V and P reads end first.
  if (part != nullptr && sp.active > 1) __syncthreads();
  // Every warp holds the same rows (its own dims): warp 0 stores (m, l).
  const WarpRowsDest dest{sp.row, sp.h0, sp.group, sp.split, a.num_splits, sp.active, part,
                          warp * kNbW, warp == 0};
  StoreWarpRows<D, kNbW>(a, dest, g, t, m0, m1, l0, l1, o);
}

}  // namespace pg::cuda::decode
