// Tensor-core decode attention (bf16 or fp8 KV, head_dim 64 / 128, GQA group <= 16): the default
// decode kernel for those shapes (decode_attention.cu dispatches; its CUDA-core kernel does
// the rest). Same work split and outputs as that kernel: a block owns (sequence, kv head,
// split), its 4 warps take 16-key tiles round robin through a 3-stage cp.async ring each.
//
// mma.sync m16n8k16 (bf16 in, f32 accumulate; fragment layouts in mla/mma_util.cuh), with the
// kv head's query heads as the 16 A rows (rows >= group are zero):
//   S[16 x 16 keys] = Q · K^T: K rows are B operands read straight from a thread-private
//     smem copy: lane (g, t) = (lane / 4, lane % 4) holds key g of each 8-key half, 16-byte
//     vectors v at dims v * 32 + t * 8 (coalesced 64-byte runs per key); a k-chunk c of 16 is
//     the dims {v * 32 + t' * 8 + (c % 2) * 4 + 0..3 : t'} with v = c / 2. The dot product
//     is invariant under this permutation when Q's A fragments use the same one.
//   O[16 x D] += P · V: P from S's accumulators (the C layout of two 8-key tiles is the A
//     layout), V through ldmatrix.trans from a [16 keys][D] tile swizzled by 16-byte chunk
//     (chunk ^ key % 8: conflict-free).
// Online softmax in fp32, log2 units, per row; the scale multiplies S in fp32 (q stays bf16).
// fp8 caches: K vectors hold 16 dims (dims v * 64 + t * 16 + ...), widened to f16 in registers;
// raw V chunks are widened by the lane that copied them into a per-warp f16 tile; the products
// run in f16 (q and p rounded to f16, finer than bf16).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <type_traits>

#include "core/env.h"
#include "kernels/cuda/attention/decode_common.cuh"
#include "kernels/cuda/attention/decode_fused.cuh"
#include "kernels/cuda/attention/decode_mma_util.cuh"
#include "kernels/cuda/attention/decode_xw.cuh"
#include "kernels/cuda/mla/mma_util.cuh"

namespace pg::cuda::decode {
namespace {

constexpr int kStages = 3;
constexpr int kTK = 16;  // keys per warp tile
// The fused kernel's small-shared-memory variant (kSt = kSmallStages; decode_fused.h
// SetDecodeFusedSmallMode): one ring stage a warp, 3 or 4 of the block's 4 warps taking tiles
// (kTW: a fourth warp without a ring still shares the new token's preparation and the merges,
// whose latency chains measured 2.7 us slower on 3 warps), the new token's scratch and the
// merge sized by the GQA group: 27-36 KB a block at d 128 instead of ~102 KB, so two of its
// blocks sit on an SM beside a ring GEMV block (gemv_ring.cu, 137-173 KB; kTW 3 beside the
// 173 KB one): the GEMV before it (qkv) and after it (o) overlap it instead of waiting for its
// blocks to exit. Its first tile is issued before PdlWait as the 3-stage kernel's first
// two; with more than one tile a warp the loads of tile i + 1 wait for tile i's math (the plan
// picks it only where each warp gets at most PG_FUSED_SMALL_MAX_TILES tiles). A two-stage form
// (kSt 2; d 128 bf16, 4 tile warps: ~67 KB a block) loads each warp's first two tiles before
// PdlWait: the two-tile plan's 128-key splits (decode_fused_plan.cu TwoTilePlan).
constexpr int kSmallStages = 1;
std::atomic<int64_t> g_cluster_launches{0}, g_xw_async_launches{0};

// kF8: fp8 e4m3 cache; K and V are widened to f16 (exact) and the products run in f16 (q, p
// rounded to f16: more mantissa than bf16); bf16 caches run bf16 products.
// S: ring stages a warp (kStages; kSmallStages for the fused small variant).
template <int D, bool kF8, int S = kStages>
struct MmaGeo {
  static constexpr int kElem = kF8 ? 1 : 2;          // cache bytes per element
  static constexpr int kVe = 16 / kElem;             // dims per 16-byte vector
  static constexpr int kCpv = kVe / 4;               // QK k-chunks per K vector
  static constexpr int kNvt = D / (4 * kVe);         // K vectors per lane per key
  static constexpr int kKc = D / 16;                 // QK k-chunks
  static constexpr int kNb = D / 8;                  // PV n-blocks (= 16-bit V chunks per key)
  static constexpr int kVc = D * kElem / 16;         // raw V chunks per key row
  static constexpr int kKU4 = 2 * kNvt * 32;         // K uint4 per stage (thread-private)
  static constexpr int kVU4 = kTK * kVc;             // raw V uint4 per stage
  static constexpr int kStageU4 = kKU4 + kVU4;
  static constexpr int kTileU4 = kF8 ? kTK * kNb : 0;  // fp8: the warp's widened f16 V tile
  static constexpr int kWarpU4 = S * kStageU4 + kTileU4;
  static constexpr int kSmemBytes = kWarps * kWarpU4 * 16;
  // The fused kernel: the ring, then the new token's scratch (decode_fused.cuh).
  static constexpr int kFusedSmemBytes = kSmemBytes + FusedScratch<D>::kBytes;
  static_assert(D % 64 == 0, "head_dim 64 or 128");
  // kStages: the warps' merge buffers ([kWarps][16 rows][D + 2] floats) fit the ring, and the
  // fused merge's split weights ([16][<= 256] floats) after them. The small variant's merge
  // uses `group` rows and num_splits weights a row: its launcher sizes the shared memory
  // (FusedSmallSmemBytes).
  static_assert(S != kStages || kWarps * 16 * (D + 2) * 4 <= kSmemBytes, "merge does not fit the ring");
  static_assert(S != kStages || kWarps * 16 * (D + 2) * 4 + 16 * 256 * 4 <= kFusedSmemBytes,
                "fused split weights do not fit");
};

// Rows a warp of the kernel with S stages keeps in shared memory (merge buffers, the new
// token's q scratch): 16 (the MMA's A rows) for the 3-stage kernels, the GQA group for the
// small variant.
template <int S>
__host__ __device__ constexpr int MergeRows(int group) {
  return S == kStages ? 16 : (group < 16 ? group : 16);
}

// Dynamic shared memory of the small fused variant with kTW tile warps: their rings + the
// new-token scratch, or the merge (kWarps x rows x (D + 2) floats, then rows x num_splits split
// weights) if larger (the merge overlays both after the key loop). d 128 bf16, group 4
// (Llama-3.1-8B), kTW 3: 24576 + 2624 = 27200 bytes.
// kXw: the exchange form's buffers (decode_xw.cuh) follow the scratch.
template <int D, bool kF8, int kTW, int S = kSmallStages, bool kXw = false>
constexpr int FusedSmallSmemBytes(int group, int num_splits) {
  using M = MmaGeo<D, kF8, S>;
  const int rows = MergeRows<S>(group);
  const int merge = (kWarps * rows * (D + 2) + rows * num_splits) * 4;
  const int ring = kTW * M::kWarpU4 * 16 + FusedScratch<D>::Bytes(rows) + (kXw ? XwBytes(kTW * S) : 0);
  return (ring > merge ? ring : merge + 15) / 16 * 16;
}

struct NoFusion {};  // the unfused kernel's (empty) second parameter

// kFused (round-robin layout only): ops_fused_attention.h RopeKvWriteAttention, with the
// new token's rows in `f` (decode_fused.cuh states the invariants): the block's cache range
// stops below the new position, its ring is filled before PdlWait, the new token enters the
// online softmax first (from shared memory; the owning block writes its slot), and the last
// split block merges the splits.
// kHeadWarps: the block's warps are consecutive kv heads (blockDim.x / 32 of them from
// blockIdx.y * warps) and each walks every tile of the split: the block reads each token's
// K/V rows of all its heads together (contiguous 2 KB per token at 8 x 128 bf16; the cache
// is token-major within a page), and each warp writes its own heads. Otherwise 4 warps share
// one kv head, take its tiles round robin and merge through shared memory.
// kSt: ring stages a warp (kStages; 1 or 2: the fused small variant only). The first kLead
// tiles go into the ring before the loop (before PdlWait when fused), then tile i + kSt - 1 at
// the top of iteration i, into the stage tile i - 1 freed (kSt 1: tile i).
// kTW: warps of the round-robin layout that take tiles (and own a ring): kWarps, or 3 / 4 for
// the small variant (its block still has kWarps warps; warp 3 of kTW 3 takes no tile).
// Registers: the one-stage small variant is bounded to <= 168 a thread (three 4-warp blocks an
// SM), as it compiled with the softcap (164); without it ptxas chose 170, which the 8-register
// granule allocates as 176 and an SM sub-partition beside a ring GEMV's warps then fits fewer.
// The others keep no minimum (0: unspecified; their registers as before), but the exchange
// forms, bounded as the one-stage variant (the two-stage one compiled to 252 unbounded).
// kXw: the small variant's exchange form (decode_xw.cuh) where the split's tiles all fit the
// rings (else the loop below runs); bf16 caches.
// kPrep: q rows a warp prepares in registers (PrepareNewTokenFast's kMaxQ); 0: by kSt and kXw
// (below). The two-stage loop form takes 2 for groups of 5-8 (LaunchFused), 1 for the two-tile
// plan's groups of <= 4, whose kernel carries one row's code.
template <int D, bool kF8, bool kHeadWarps, bool kFused, int kSt = kStages, int kTW = kWarps,
          bool kXw = false, int kPrep = 0>
__global__ void __launch_bounds__(kSt == 1 || kXw ? kWarps * 32 : 256, kSt == 1 || kXw ? 3 : 0)
    DecodeMmaKernel(const __grid_constant__ AttentionArgs a,
                    const __grid_constant__ std::conditional_t<kFused, RopeKvWriteArgs, NoFusion> f) {
  PG_BLOCK_TRACE(kTraceDecodeMma);
  static_assert(!(kFused && kHeadWarps), "the fused kernel uses the round-robin layout");
  static_assert(kSt == kStages || (kFused && kSt < kStages), "small variant: fused only");
  static_assert(kSt < kStages ? (kTW == 3 || kTW == 4) : kTW == kWarps, "tile warps");
  static_assert(!kXw || (kFused && kSt < kStages && !kF8), "exchange form: small variant, bf16");
  // Tiles in the ring before the loop: all of a small variant's stages (its warps' first kSt
  // tiles load before PdlWait), one stage less for the 3-stage kernel.
  constexpr int kLead = kSt < kStages ? kSt : kSt - 1;
  using M = MmaGeo<D, kF8, kSt>;
  using KvT = std::conditional_t<kF8, kv::fp8, bf16>;
  extern __shared__ uint4 smem[];
  const DeviceBatchView& b = a.batch;  // uploaded before the step: readable before PdlWait
  const int s = blockIdx.x;
  if (b.q_len[s] != 1) return;  // a multi-token sequence: another kernel's (block-uniform)
  const int group = a.heads / a.kv_heads;
  const int split = blockIdx.z, num_splits = gridDim.z;
  const int active_splits = ActiveSplits(a, s, num_splits);
  // The exchange form's asynchronous push (xw_async): no second cluster barrier phase; each
  // owner waits on its own transaction barrier (decode_xw.cuh).
  [[maybe_unused]] const bool xw_async = kXw && a.cluster_merge && a.xw_async;
  if constexpr (kFused && kSt < kStages) {
    if (xw_async) XwAsyncInit(a, group, active_splits, ClusterRank());
    if (a.cluster_merge) ClusterMergeStart();  // the merge barrier's first phase
  }
  if (split >= active_splits) {  // surplus split of a graph planned for longer contexts
    if constexpr (kFused && kSt < kStages) {
      if (xw_async) asm volatile("barrier.cluster.wait;" ::: "memory");  // the one phase
      else if (a.cluster_merge) ClusterMergeSplits(a, 0, 0, 0, 0, split, nullptr);  // the barriers only
    }
    return;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int warps = kHeadWarps ? int(blockDim.x) / 32 : kWarps;
  const int kvh = kHeadWarps ? int(blockIdx.y) * warps + warp : int(blockIdx.y);
  const bool active = kvh < a.kv_heads;  // a trailing head warp may have no head
  const int first_tile = kHeadWarps ? 0 : warp, tile_step = kHeadWarps ? 1 : kTW;
  const bool tile_warp = kHeadWarps || warp < kTW;  // takes tiles (has a ring)
  const int row = b.q_start[s];
  const int h0 = (active ? kvh : 0) * group;
  const SplitRange r = SplitOf(a, s, split, active_splits);
  const int32_t* pages = b.page_table + b.page_start[s];
  const int ps = b.page_size;
  // Cache keys [r.begin, kv_end): the fused kernel's stop below the new position (its row
  // comes from the projection; the owner split writes it).
  const int new_pos = b.kv_len[s] - 1;
  const bool owner = kFused && r.begin <= new_pos && new_pos < r.end;
  const int kv_end = kFused ? min(r.end, new_pos) : r.end;
  const int keys = max(0, kv_end - r.begin);
  const int tiles = (keys + kTK - 1) / kTK;
  const int my_tiles = active && tile_warp && first_tile < tiles
                           ? (tiles - first_tile + tile_step - 1) / tile_step : 0;
  const char* kc = static_cast<const char*>(a.k_cache);
  const char* vc = static_cast<const char*>(a.v_cache);
  const int64_t row_bytes = int64_t(D) * M::kElem;
  const int64_t slot_bytes = int64_t(a.kv_heads) * row_bytes;
  auto slot = [&](int key) {
    return (int64_t(pages[key / ps]) * ps + key % ps) * slot_bytes + int64_t(kvh) * row_bytes;
  };
  // Warms L2 with the K and V rows of this warp's i-th tile: lane -> (key lane % 16, 128-byte
  // line lane / 16 + 2j of the row).
  auto prefetch_tile = [&](int i) {
    const int key = min(r.begin + (first_tile + i * tile_step) * kTK + lane % kTK, kv_end - 1);
    const int64_t off = slot(key);
    for (int64_t o = (lane / kTK) * 128; o < row_bytes; o += 256) {
      PrefetchL2(kc + off + o);
      PrefetchL2(vc + off + o);
    }
  };
  uint4* ring = smem + warp * M::kWarpU4;
  uint4* vtile = ring + kSt * M::kStageU4;  // fp8 only: widened V [key][chunk], swizzled
  const int vk = lane / 2;  // the key whose V chunks 2 i2 + lane % 2 this lane copies

  // Tile i's K half (thread-private: lane (g, t) reads back only what it copied) and V half
  // (the ldmatrix tile, read by every lane) of stage i % kSt.
  auto issue_k = [&](int i) {
    uint4* st = ring + (i % kSt) * M::kStageU4;
    const int key0 = r.begin + (first_tile + i * tile_step) * kTK;
#pragma unroll
    for (int bb = 0; bb < 2; ++bb) {  // K: key g of each 8-key half, this lane's vectors
      const int64_t off = slot(min(key0 + bb * 8 + g, kv_end - 1)) + t * 16;  // clamped: masked
#pragma unroll
      for (int v = 0; v < M::kNvt; ++v) CpAsync16(st + (bb * M::kNvt + v) * 32 + lane, kc + off + v * 64, 16);
    }
  };
  auto issue_v = [&](int i) {
    uint4* sv = ring + (i % kSt) * M::kStageU4 + M::kKU4;
    const int key0 = r.begin + (first_tile + i * tile_step) * kTK;
    const int64_t off = slot(min(key0 + vk, kv_end - 1));
#pragma unroll
    for (int i2 = 0; i2 < M::kVc / 2; ++i2) {
      const int chunk = 2 * i2 + lane % 2;
      // bf16: straight into the ldmatrix tile; fp8: thread-private, widened at use.
      uint4* dst = kF8 ? sv + i2 * 32 + lane : sv + vk * M::kNb + (chunk ^ (vk % 8));
      CpAsync16(dst, vc + off + chunk * 16, 16);
    }
  };
  auto issue = [&](int i) { issue_k(i), issue_v(i); };
  // The split ring (a.kv_split_ring; the two-stage small variant's loop form, bf16): each
  // stage's K and V halves are their own cp.async groups, and a half is refilled as soon as its
  // tile's use of it ends (K after QK, V after PV): 12 of a warp's 16 KB in flight on average
  // instead of 8, and V's wait after the softmax instead of before QK.
  constexpr bool kSplitRingForm = kFused && kSt == 2 && !kF8;  // kSt 2: the small variant
  const bool split_ring = kSplitRingForm && a.kv_split_ring;

  // Before PdlWait (PDL: the previous kernel may still run): the batch plan and the page
  // table are the step's inputs, and the cache rows are readable into L2 (L2 is coherent).
  // Unfused: the new token's row is being written by RopeKvWrite (the cp.async reads after
  // the wait see it), so only L2 prefetches here. Fused: the split's first tiles go into the
  // ring (every key read is below the new position: decode_fused.cuh invariants).
  if constexpr (kFused) {
#pragma unroll
    for (int i = 0; i < kLead; ++i) {
      if (split_ring) {  // groups K0, V0, K1, V1
        if (i < my_tiles) issue_k(i);
        CpAsyncCommit();
        if (i < my_tiles) issue_v(i);
      } else if (i < my_tiles) {
        issue(i);
      }
      CpAsyncCommit();
    }
  }
  const int warm = a.l2_prefetch_tiles < 0 ? 0 : min(my_tiles, kLead + a.l2_prefetch_tiles);
  for (int i = kFused ? kLead : 0; i < warm; ++i) prefetch_tile(i);
  if (!a.pdl_late_trigger) PdlTrigger();
  // The new token's inputs no kernel of the step writes (decode_fused.cuh NewTokenInputs),
  // after the trigger: their loads stall this thread (the angles need the position), and the
  // next kernel's launch must not wait for them (measured: Llama-3.1-8B 1 x 1K +28 us a step).
  [[maybe_unused]] NewTokenInputs<D> nti;
  if constexpr (kFused) nti = LoadNewTokenInputs<D>(f, a, s, row, kvh);
  PdlWait();  // q and the new token's K/V (rotated in place unless fused) are visible from here
  // The fused kernel has no logit softcap (FusedAttentionSupported sends softcapped layers to
  // the composition): a compile-time zero drops the capping (a division and tanh a score,
  // with its slow path) from the new token's preparation and the tile loop, whose code an
  // SM's first block of a layer runs from cold instruction caches (the d-128 small kernel's
  // key loop: 14 -> 6.7 KB of SASS).
  const float softcap_v = kFused ? 0.0f : a.softcap;
  const float qscale = a.logit_scale * (softcap_v > 0.0f ? 1.0f : kLog2e);
  if constexpr (kFused) {
    const FusedScratch<D> fs(smem + kTW * M::kWarpU4, MergeRows<kSt>(group));
    // The two-tile plan (kSt 2) takes groups of <= kWarps rows only (decode_fused_plan.cu
    // TwoTilePlan): one q row a warp; a larger group (never planned) takes the other form. The
    // cluster plan's exchange form at two stages (ClusterFit) has groups of up to 8: two a warp.
    constexpr int kPrepRows = kPrep > 0 ? kPrep
                              : kSt == 2 ? (kXw ? 2 : 1)
                                         : (FusedScratch<D>::kRows + kWarps - 1) / kWarps;
    constexpr bool kAnyGroup = kPrepRows * kWarps >= FusedScratch<D>::kRows;
    if (nti.fast && a.fused_prep_registers && (kAnyGroup || group <= kWarps * kPrepRows))
      PrepareNewTokenFast<D, KvT, kPrepRows>(f, row, kvh, group, owner, qscale, softcap_v, nti, fs);
    else
      PrepareNewToken<D, KvT>(f, a, s, row, kvh, group, owner, qscale, softcap_v, fs);
  }
  PG_TRACE_MARK(0);  // the new token prepared

  // Q as A fragments: rows g and g + 8 = heads h0 + g, h0 + g + 8 (zero past the group), in
  // the K vector layout below (decode_mma_util.cuh LoadQFragments).
  uint32_t qa[M::kKc][4];
  {
    const bf16* q = kFused ? FusedScratch<D>(smem + kTW * M::kWarpU4, MergeRows<kSt>(group)).q
                           : a.q + int64_t(row) * a.q_stride + int64_t(h0) * D;
    LoadQFragments<kF8, D, M::kKc, M::kCpv, M::kVe>(qa, q, active ? group : 0, g, t);
  }
  if constexpr (kXw) {
    // The loop below merges through the cluster barrier, which the asynchronous push's blocks
    // do not reach: the host never plans it (XwApplies); fail the launch rather than hang.
    if (xw_async && tiles > kTW * kSt) __trap();
    if (tiles <= kTW * kSt) {  // block-uniform; every tile issued before PdlWait (kLead = kSt)
      const int mrows = MergeRows<kSt>(group);  // (group <= 16: MmaFusedSupports)
      const FusedScratch<D> fs(smem + kTW * M::kWarpU4, mrows);
      float* xw = reinterpret_cast<float*>(reinterpret_cast<char*>(smem) + kTW * M::kWarpU4 * 16 +
                                           FusedScratch<D>::Bytes(mrows));
      float* part = a.cluster_merge ? reinterpret_cast<float*>(reinterpret_cast<char*>(smem) +
                                                               ClusterPartOffset(mrows, D, num_splits))
                                    : nullptr;
      const XwSplit sp{row, h0, group, split, active_splits, r.begin, kv_end, tiles, my_tiles,
                       owner, qscale};
      XwSplitAndStore<M, D, kSt, kTW>(a, sp, qa, smem, fs, xw, part);
      PG_TRACE_MARK(2);  // the split stored
      if (part != nullptr) {  // every split's block owns a share of the merge (one call site)
        if (xw_async) {  // pushed with st.async, counted on this block's barrier
          if (active_splits > 1) XwAsyncOwnerWait(a, group);
        } else {  // (xw_push: pushed from registers already)
          if (!a.xw_push) ClusterMergePush(a, group, active_splits, split, part);
          ClusterMergeBarrier();
        }
        if (active_splits > 1) ClusterMergeItems(a, row, h0, group, active_splits, ClusterRank());
      } else  // split weights [group][active] where the loop's merge keeps them (past the rings' use)
        FusedFinishSplits(a, row, h0, group, active_splits,
                          reinterpret_cast<float*>(smem) + kWarps * mrows * (D + 2));
      return;
    }
  }

  float o[M::kNb][4];
#pragma unroll
  for (int nb = 0; nb < M::kNb; ++nb) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // rows g and g + 8

  if constexpr (kFused) {  // the new token first: warp 0 holds it (p = 1 at its own max)
    if (owner && warp == 0) {
      const FusedScratch<D> fs(smem + kTW * M::kWarpU4, MergeRows<kSt>(group));
      // l is summed over the quad's 4 lanes at the end: the key's p = 1 counts in lane t 0.
      if (g < group) {
        m0 = fs.score[g], l0 = t == 0 ? 1.0f : 0.0f;
#pragma unroll
        for (int nb = 0; nb < M::kNb; ++nb) o[nb][0] = fs.v[nb * 8 + 2 * t], o[nb][1] = fs.v[nb * 8 + 2 * t + 1];
      }
      if (g + 8 < group) {
        m1 = fs.score[g + 8], l1 = t == 0 ? 1.0f : 0.0f;
#pragma unroll
        for (int nb = 0; nb < M::kNb; ++nb) o[nb][2] = fs.v[nb * 8 + 2 * t], o[nb][3] = fs.v[nb * 8 + 2 * t + 1];
      }
    }
  }

  if constexpr (!kFused) {
#pragma unroll
    for (int i = 0; i < kLead; ++i) {
      if (i < my_tiles) issue(i);
      CpAsyncCommit();
    }
  }
  if constexpr (kSplitRingForm) {
    if (split_ring) {
      // Groups committed before iteration i: K0 V0 K1 V1, then K_{j+2} V_{j+2} for each j < i
      // (empty past my_tiles): 2 (i + 2). K_i is group 2 i and V_i group 2 i + 1, each with
      // three groups after it at its wait.
      for (int i = 0; i < my_tiles; ++i) {
        CpAsyncWait<3>();  // this lane's K_i copies landed (thread-private: no warp barrier)
        if (i == 0) PG_TRACE_MARK(3);
        const uint4* st = ring + (i % kSt) * M::kStageU4;
        const int key0 = r.begin + (first_tile + i * tile_step) * kTK;
        float sc[2][4];
        QkTile<kF8, M::kNvt, M::kCpv, M::kKc>(sc, st, qa, lane);
        if (i + 2 < my_tiles) issue_k(i + 2);  // K_i's copies, read back above, are in registers
        CpAsyncCommit();
        uint32_t pa[4];
        SoftmaxTileStep<kF8, M::kNb>(sc, qscale, softcap_v, key0, t, kv_end, m0, m1, l0, l1, o, pa);
        CpAsyncWait<3>();  // V_i landed (K_{i+1}, V_{i+1}, K_{i+2} may be in flight)
        __syncwarp();      // every lane's V_i copies are visible
        PvTile<kF8, M::kNb, M::kNb>(o, pa, st + M::kKU4, 0, lane);
        __syncwarp();      // every lane is done reading V_i
        if (i + 2 < my_tiles) issue_v(i + 2);
        CpAsyncCommit();
      }
    }
  }
  for (int i = 0; i < (split_ring ? 0 : my_tiles); ++i) {
    __syncwarp();  // every lane is done reading the stage (and tile) about to be overwritten
    // Tile i + kSt - 1 goes into the stage tile i - 1 used (kSt 1: tile i itself, unless it is
    // one of the kLead tiles already issued). Groups committed so far: one per tile <= i +
    // kSt - 1 (empty ones past my_tiles), so waiting for all but kSt - 1 leaves tile i landed.
    const int next = i + kSt - 1;
    if (next >= kLead && next < my_tiles) issue(next);
    if (a.l2_prefetch_tiles > 0 && next + a.l2_prefetch_tiles < my_tiles)
      prefetch_tile(next + a.l2_prefetch_tiles);
    CpAsyncCommit();
    CpAsyncWait<kSt - 1>();
    if (i == 0) PG_TRACE_MARK(3);  // the first tile landed
    const uint4* st = ring + (i % kSt) * M::kStageU4;
    const uint4* sv = st + M::kKU4;
    if constexpr (kF8) {  // widen this lane's raw V chunks into the f16 tile
      sv = vtile;
#pragma unroll
      for (int i2 = 0; i2 < M::kVc / 2; ++i2) {
        const uint4 raw = st[M::kKU4 + i2 * 32 + lane];
        const int c16 = 2 * (2 * i2 + lane % 2);  // first of the two f16 chunks (8 dims each)
        const uint4 w0 = make_uint4(F8x2ToH2(raw.x), F8x2ToH2(raw.x >> 16), F8x2ToH2(raw.y), F8x2ToH2(raw.y >> 16));
        const uint4 w1 = make_uint4(F8x2ToH2(raw.z), F8x2ToH2(raw.z >> 16), F8x2ToH2(raw.w), F8x2ToH2(raw.w >> 16));
        vtile[vk * M::kNb + (c16 ^ (vk % 8))] = w0;
        vtile[vk * M::kNb + ((c16 + 1) ^ (vk % 8))] = w1;
      }
    }
    __syncwarp();  // the V tile (written by other lanes) is visible
    const int key0 = r.begin + (first_tile + i * tile_step) * kTK;

    float sc[2][4];
    QkTile<kF8, M::kNvt, M::kCpv, M::kKc>(sc, st, qa, lane);
    // Scores to p in log2 units, (m, l, o) updated, p packed (decode_mma_util.cuh).
    uint32_t pa[4];
    SoftmaxTileStep<kF8, M::kNb>(sc, qscale, softcap_v, key0, t, kv_end, m0, m1, l0, l1, o, pa);
    PvTile<kF8, M::kNb, M::kNb>(o, pa, sv, 0, lane);
  }
  CpAsyncWait<0>();
  if (a.pdl_late_trigger) PdlTrigger();
  PG_TRACE_MARK(1);  // the split's keys done

  // Row sums over the quad; then the warps merge through shared memory (the ring is free).
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, off);
    l1 += __shfl_xor_sync(0xffffffffu, l1, off);
  }
  if constexpr (kHeadWarps) {  // each warp stores its own heads
    if (active)
      StoreWarpRows<D, M::kNb>(a, {row, h0, group, split, num_splits, active_splits}, g, t, m0, m1,
                               l0, l1, o);
    const int first_kvh = int(blockIdx.y) * warps;
    FinishSplits(a, row, first_kvh * group, (min(a.kv_heads, first_kvh + warps) - first_kvh) * group,
                 active_splits);
    return;
  }
  __syncthreads();
  const int mrows = MergeRows<kSt>(group);           // rows >= group are never stored
  float* sm_acc = reinterpret_cast<float*>(smem);  // [kWarps][mrows][D]
  float* sm_m = sm_acc + kWarps * mrows * D;       // [kWarps][mrows]
  float* sm_l = sm_m + kWarps * mrows;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int rr = g + 8 * hr;
    if (rr >= group) continue;
    if (t == 0) sm_m[warp * mrows + rr] = hr ? m1 : m0, sm_l[warp * mrows + rr] = hr ? l1 : l0;
    float* dst = sm_acc + (warp * mrows + rr) * D + 2 * t;
#pragma unroll
    for (int nb = 0; nb < M::kNb; ++nb) dst[nb * 8] = o[nb][2 * hr], dst[nb * 8 + 1] = o[nb][2 * hr + 1];
  }
  __syncthreads();
  const int ng = min(group, 16);
  float* cluster_part = nullptr;  // ClusterMergeSplits' partial (small fused variant)
  if constexpr (kFused && kSt < kStages)
    if (a.cluster_merge)
      cluster_part = reinterpret_cast<float*>(reinterpret_cast<char*>(smem) +
                                              ClusterPartOffset(mrows, D, num_splits));
  MergeWarpsAndStore(a, sm_acc, sm_m, sm_l, mrows, ng, D, row, h0, split, active_splits,
                     /*finish=*/!kFused, cluster_part);
  PG_TRACE_MARK(2);  // the split stored
  if constexpr (kFused) {
    if (cluster_part != nullptr) ClusterMergeSplits(a, row, h0, ng, active_splits, split, cluster_part);
    else  // split weights [ng][active] after the merge buffers
      FusedFinishSplits(a, row, h0, ng, active_splits, sm_l + kWarps * mrows);
  }
}

// Resident blocks per SM of one instantiation at `warps` warps per block (opts into the
// shared memory once; cached per warp count).
template <int D, bool kF8, bool kHeadWarps, bool kFused = false>
int Occupancy(int warps) {
  static int cached[9] = {};
  if (cached[warps] == 0) {
    const void* k = reinterpret_cast<const void*>(&DecodeMmaKernel<D, kF8, kHeadWarps, kFused>);
    const int extra = kFused ? FusedScratch<D>::kBytes : 0;
    const int smem = warps * MmaGeo<D, kF8>::kWarpU4 * 16 + extra;
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         8 * MmaGeo<D, kF8>::kWarpU4 * 16 + extra);
    int n = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, warps * 32, smem);
    cached[warps] = n > 0 ? n : 1;
  }
  return cached[warps];
}

template <int D, bool kF8, bool kHeadWarps>
void Launch(const AttentionArgs& a, dim3 grid, int warps, cudaStream_t stream) {
  (void)Occupancy<D, kF8, kHeadWarps>(warps);  // sets the shared-memory attribute
  LaunchPdl(DecodeMmaKernel<D, kF8, kHeadWarps, false>, grid, dim3(unsigned(warps * 32)),
            size_t(warps) * MmaGeo<D, kF8>::kWarpU4 * 16, stream, a, NoFusion{});
}

// The small variant's attributes, once per instantiation: room for the largest merge any
// launch asks (group 16, 256 splits: DecodeFusedSplits' cap) and the largest shared-memory
// carveout, so that an SM that runs a ring GEMV block can take two of its blocks (the SM's
// L1 / shared split changes only when it drains; PG_FUSED_SMALL_CARVEOUT=-1 leaves it to the
// driver, A/B).
template <int D, bool kF8, int kTW, int S, bool kXw, int kPrep>
void PrepareSmall() {
  static const bool done = [] {
    const void* k = reinterpret_cast<const void*>(&DecodeMmaKernel<D, kF8, false, true, S, kTW, kXw, kPrep>);
    // (+ the cluster merge's inbox, which LaunchSmall places right past it)
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         FusedSmallSmemBytes<D, kF8, kTW, S, kXw>(16, 256) + ClusterInboxBytes(16, D) +
                             (kXw ? kXwAsyncBarBytes : 0));
    const int carveout = EnvInt("PG_FUSED_SMALL_CARVEOUT", 100);
    if (carveout >= 0) cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, carveout);
    return true;
  }();
  (void)done;
}

template <int D, bool kF8, int kTW, int S = kSmallStages, bool kXw = false, int kPrep = 0>
void LaunchSmall(const AttentionArgs& a_in, const RopeKvWriteArgs& rope, dim3 grid, cudaStream_t stream) {
  PrepareSmall<D, kF8, kTW, S, kXw, kPrep>();
  const int group = a_in.heads / a_in.kv_heads, ng = std::min(group, 16);
  const int smem = FusedSmallSmemBytes<D, kF8, kTW, S, kXw>(group, a_in.num_splits);  // 16-byte multiple
  AttentionArgs a = a_in;
  // The cluster merge where a kv head's splits fit one cluster and its partial fits the
  // block's shared memory past the merge buffers.
  a.cluster_merge = a_in.cluster_merge && a.num_splits > 1 && a.num_splits <= kMaxClusterSplits &&
                    ClusterPartOffset(MergeRows<S>(group), D, a.num_splits) + ClusterPartBytes(ng, D) <= smem;
  auto* k = DecodeMmaKernel<D, kF8, false, true, S, kTW, kXw, kPrep>;
  if (!a.cluster_merge) {
    LaunchPdl(k, grid, dim3(unsigned(kWarps * 32)), size_t(smem), stream, a, rope);
    return;
  }
  // The merge's inbox (decode_fused.cuh ClusterMergeSplits) past everything the block writes
  // before the merge's barrier (ring, scratch, warp merge buffers and, by the rule above, its
  // own partial: all within smem): peers store into it while this block may still walk its keys.
  a.cluster_inbox = smem;
  // (+ the asynchronous push's transaction barrier right past the inbox)
  a.xw_async = kXw && a.xw_async;
  if (a.xw_async) g_xw_async_launches.fetch_add(1, std::memory_order_relaxed);
  const size_t smem_total = size_t(smem) + size_t(ClusterInboxBytes(ng, D)) + (a.xw_async ? kXwAsyncBarBytes : 0);
  g_cluster_launches.fetch_add(1, std::memory_order_relaxed);
  static const bool non_portable = [k] {
    return cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
  }();
  (void)non_portable;
  LaunchPdlCluster(k, grid, dim3(unsigned(kWarps * 32)), dim3(1, 1, unsigned(a.num_splits)),
                   smem_total, stream, a, rope);
}

// The cluster plan's loop form (small variant, 4 tile warps, 2 stages) prepares two q rows a
// warp; DecodeFusedLoopFormRegisters reads the same instance.
constexpr int kLoopFormPrep = 2;
template <int D, bool kF8>
constexpr auto kLoopFormKernel = DecodeMmaKernel<D, kF8, false, true, 2, 4, false, kLoopFormPrep>;

// small_warps: 0 the 3-stage kernel, 3 / 4 the small variant with that many tile warps;
// stages: the small variant's ring stages a warp (2: d 128 bf16 with 4 tile warps only, else 1);
// xw: the small variant's exchange form (bf16 only).
template <int D, bool kF8>
void LaunchFused(const AttentionArgs& a, const RopeKvWriteArgs& rope, dim3 grid, int small_warps,
                 int stages, bool xw, cudaStream_t stream) {
  if constexpr (!kF8) {
    if constexpr (D == 128)
      if (xw && small_warps == 4 && stages == 2) return LaunchSmall<D, kF8, 4, 2, true>(a, rope, grid, stream);
    if (xw && small_warps == 3 && stages == 1) return LaunchSmall<D, kF8, 3, 1, true>(a, rope, grid, stream);
    if (xw && small_warps == 4 && stages == 1) return LaunchSmall<D, kF8, 4, 1, true>(a, rope, grid, stream);
  }
  if constexpr (D == 128 && !kF8)
    if (small_warps == 4 && stages == 2) {
      if (a.heads / a.kv_heads > kWarps)  // the cluster plan's two-stage loop (groups 5-8)
        return LaunchSmall<D, kF8, 4, 2, false, kLoopFormPrep>(a, rope, grid, stream);
      return LaunchSmall<D, kF8, 4, 2>(a, rope, grid, stream);
    }
  if (small_warps == 3) return LaunchSmall<D, kF8, 3>(a, rope, grid, stream);
  if (small_warps == 4) return LaunchSmall<D, kF8, 4>(a, rope, grid, stream);
  (void)Occupancy<D, kF8, false, true>(kWarps);  // sets the shared-memory attribute
  LaunchPdl(DecodeMmaKernel<D, kF8, false, true>, grid, dim3(unsigned(kWarps * 32)),
            size_t(MmaGeo<D, kF8>::kFusedSmemBytes), stream, a, rope);
}

// Head warps (default) or the round-robin variant (PG_DECODE_MMA_ROUND_ROBIN=1: A/B runs).
bool HeadWarps() {
  static const bool rr = EnvFlag("PG_DECODE_MMA_ROUND_ROBIN", false);
  return !rr;
}

// Warps per block of the head-warp variant: up to 8 kv heads (all of Llama-3-8B's).
int HeadWarpCount(int kv_heads) { return kv_heads >= 8 ? 8 : kv_heads; }

template <bool kHeadWarps>
int OccupancyFor(const AttentionArgs& a, int warps) {
  const bool f8 = a.kv_type == KvType::kF8E4M3;
  if (a.head_dim == 64)
    return f8 ? Occupancy<64, true, kHeadWarps>(warps) : Occupancy<64, false, kHeadWarps>(warps);
  return f8 ? Occupancy<128, true, kHeadWarps>(warps) : Occupancy<128, false, kHeadWarps>(warps);
}

}  // namespace

bool MmaSupports(int head_dim, int group, KvType) {
  return (head_dim == 64 || head_dim == 128) && group >= 1 && group <= 16;
}

MmaShape MmaLaunchShape(const AttentionArgs& a) {
  const int group = a.heads / a.kv_heads;
  if (HeadWarps()) {
    const int w = HeadWarpCount(a.kv_heads);
    return {(a.kv_heads + w - 1) / w, w, OccupancyFor<true>(a, w), w * group};
  }
  return {a.kv_heads, kWarps, OccupancyFor<false>(a, kWarps), group};
}

void LaunchMma(const AttentionArgs& a, int num_seqs, cudaStream_t stream) {
  const MmaShape sh = MmaLaunchShape(a);
  const dim3 grid(unsigned(num_seqs), unsigned(sh.grid_rows), unsigned(a.num_splits));
  const bool f8 = a.kv_type == KvType::kF8E4M3, hw = HeadWarps();
  const int w = sh.warps;
  if (a.head_dim == 64) {
    if (f8) hw ? Launch<64, true, true>(a, grid, w, stream) : Launch<64, true, false>(a, grid, w, stream);
    else hw ? Launch<64, false, true>(a, grid, w, stream) : Launch<64, false, false>(a, grid, w, stream);
  } else {
    if (f8) hw ? Launch<128, true, true>(a, grid, w, stream) : Launch<128, true, false>(a, grid, w, stream);
    else hw ? Launch<128, false, true>(a, grid, w, stream) : Launch<128, false, false>(a, grid, w, stream);
  }
}

bool MmaFusedSupports(int head_dim, int group) {
  return (head_dim == 64 || head_dim == 128) && group >= 1 && group <= FusedScratch<64>::kRows;
}

MmaShape MmaFusedShape(const AttentionArgs& a) {
  const bool f8 = a.kv_type == KvType::kF8E4M3;
  int per_sm = 1;
  if (a.head_dim == 64)
    per_sm = f8 ? Occupancy<64, true, false, true>(kWarps) : Occupancy<64, false, false, true>(kWarps);
  else
    per_sm = f8 ? Occupancy<128, true, false, true>(kWarps) : Occupancy<128, false, false, true>(kWarps);
  return {a.kv_heads, kWarps, per_sm, a.heads / a.kv_heads};
}

void LaunchMmaFused(const AttentionArgs& a, const RopeKvWriteArgs& rope, int num_seqs, int small,
                    int small_stages, bool xw, cudaStream_t stream) {
  const dim3 grid(unsigned(num_seqs), unsigned(a.kv_heads), unsigned(a.num_splits));
  const bool f8 = a.kv_type == KvType::kF8E4M3;
  const int st = small_stages;
  if (a.head_dim == 64)
    f8 ? LaunchFused<64, true>(a, rope, grid, small, st, xw, stream) : LaunchFused<64, false>(a, rope, grid, small, st, xw, stream);
  else
    f8 ? LaunchFused<128, true>(a, rope, grid, small, st, xw, stream) : LaunchFused<128, false>(a, rope, grid, small, st, xw, stream);
}

}  // namespace pg::cuda::decode

namespace pg::cuda {
int DecodeFusedLoopFormRegisters() {
  cudaFuncAttributes attr{};
  return cudaFuncGetAttributes(&attr, decode::kLoopFormKernel<128, false>) == cudaSuccess ? attr.numRegs : -1;
}
int64_t DecodeFusedClusterLaunches() { return decode::g_cluster_launches.load(std::memory_order_relaxed); }
int64_t DecodeFusedXwAsyncLaunches() { return decode::g_xw_async_launches.load(std::memory_order_relaxed); }
}  // namespace pg::cuda
