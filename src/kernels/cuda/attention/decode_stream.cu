// Streaming decode attention (bf16 or fp8 e4m3 KV, head_dim 64 / 128, GQA group <= 16,
// kv_heads <= 8): the FlashAttention-3 split of roles over the paged cache. Same outputs and
// split plan as the tensor-core kernel (decode_attention_mma.cu); decode_attention.cu
// dispatches (PG_DECODE_STREAM=0 turns it off: A/B).
//
// Block = (sequence, split) over ALL kv heads (grid (num_seqs, num_splits)). The cache is
// token-major in a page ([page_size][kv_heads][head_dim], ops.h KvCacheView), so the K (or V)
// rows of 16 consecutive keys for every head are one contiguous run per page they touch.
//   * Producer (the last warp, lane 0): streams stage after stage into a ring of
//     `stages` slots of shared memory, stage 2i = K of the split's 16-key tile i, stage 2i + 1
//     = its V, with 1-D bulk copies (one per page run, common/bulk_copy.cuh), counted in bytes
//     on the slot's full mbarrier; it reuses a slot once its empty mbarrier has kv_heads
//     arrivals (every head's reader of that tile). Keys below the sequence's new position were
//     written by earlier steps (decode: the only key a step writes is kv_len - 1, by the
//     previous kernel, RopeKvWrite / KvWrite), so the producer fills the ring before PdlWait
//     and waits only before the first tile holding the new key or once the ring is full.
//   * Consumers: warps_per_head warps per kv head (kv_heads * warps_per_head <= 8), warp
//     (head, j) takes tiles j, j + warps_per_head, ...: QK with mma.sync (the kv head's query
//     heads as the 16 A rows, rows >= group zero; the K B-fragments read as 16-byte vectors
//     straight from the stage, decode_attention_mma.cu's dim permutation), online softmax in
//     fp32 and log2 units, then V copied (fp8: widened to f16) from the stage into the warp's
//     swizzled 16-bit tile (conflict-free ldmatrix.trans; keys past the split's end zeroed, so
//     stale ring bytes never reach an MMA), the stage released, PV.
// Warps of one head merge through shared memory; one active split writes the bf16 output,
// else a partial that decode_attention.cu's combine kernel merges (default), or, with
// PG_DSTREAM_MERGE=1, the row's last blocks merge inside the kernel (MergeSplitsInKernel:
// not the default, see StreamMergers).
// Stale ring bytes: K rows past the split's end give garbage scores that are masked by a
// select (NaN-safe), V rows are zeroed in the copy.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <type_traits>

#include "core/env.h"
#include "kernels/cuda/attention/decode_common.cuh"
#include "kernels/cuda/attention/decode_mma_util.cuh"
#include "kernels/cuda/attention/decode_fused.cuh"
#include "kernels/cuda/common/bulk_copy.cuh"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/mla/mma_util.cuh"

namespace pg::cuda::decode {
namespace {

using bulk::BulkLoad;
using bulk::EvictFirstPolicy;
using bulk::MbarArrive;
using bulk::MbarArriveExpectTx;
using bulk::MbarInit;
using bulk::MbarWait;
using bulk::SmemAddr;

constexpr int kTK = 16;                 // keys per tile (the PV MMA's k)
constexpr int kMaxConsumerWarps = 8;
constexpr int kMaxThreads = (kMaxConsumerWarps + 1) * 32;
constexpr int kMaxStages = 32;
constexpr int kBarBytes = 2 * kMaxStages * 8;  // full[kMaxStages], empty[kMaxStages]
// sm_90's opt-in shared memory per block is 227 KB; 1 KB of it is left to static __shared__.
constexpr int kMaxSmem = 226 * 1024;

// Launch geometry, fixed per launch on the host (StreamPlanOf).
struct StreamPlan {
  int stages;          // ring slots, 2..kMaxStages
  int stage_bytes;     // one stage: 16 keys x kv_heads x head_dim x element bytes
  int warps_per_head;  // consumer warps per kv head
  int consumer_warps;  // kv_heads * warps_per_head (the producer is warp consumer_warps)
  int mergers;         // > 0: the last blocks of a row merge its splits (MergeSplitsInKernel)
  int tile_offset;     // bytes: the consumer warps' V tiles (after the barriers and the ring)
  int smem_bytes;
};

template <int D, bool kF8>
struct StreamGeo {
  static constexpr int kElem = kF8 ? 1 : 2;     // cache bytes per element
  static constexpr int kVe = 16 / kElem;        // dims per 16-byte K vector
  static constexpr int kCpv = kVe / 4;          // QK k-chunks per K vector
  static constexpr int kNvt = D / (4 * kVe);    // K vectors per lane per key
  static constexpr int kKc = D / 16;            // QK k-chunks
  static constexpr int kNb = D / 8;             // PV n-blocks (= 16-bit V chunks per key)
  static constexpr int kVc = D * kElem / 16;    // raw 16-byte V chunks per key row
  static constexpr int kRowBytes = D * kElem;   // one (key, head) row
  static constexpr int kVKeys = 32 / kVc;       // keys a warp's V copy covers per step
  static constexpr int kTileBytes = kTK * kNb * 16;  // a warp's 16-bit V tile [16 keys][kNb]
  // A warp's merge record per lane: o [kNb][4], m0, m1, l0, l1 (floats, lane-minor).
  static constexpr int kMergeFloats = kNb * 4 + 4;
  static_assert(D % 64 == 0, "head_dim 64 or 128");
};

__device__ __forceinline__ int AcquireLoad(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// The in-kernel merge of row `row`'s `active` split partials (p.mergers > 0; the consumer
// threads, after their partial stores). Each block takes a ticket on the row's arrival counter
// (a.split_counters[row]); the last hm = min(p.mergers, active) blocks to arrive wait until
// every block has arrived, then merge heads k, k + hm, ... (k = their rank among the last):
// the combine kernel's work spread over them without a kernel boundary, a block's heads merged
// at once by teams of its threads (a team: a multiple of head_dim / 4 threads). The host keeps
// num_seqs * p.mergers below the resident block slots, so waiting blocks never hold every SM
// while a block of the launch is still unscheduled (no deadlock); the PDL dependents launch
// only after every block has started. The last merger resets the counter and the done count
// (a.split_counters[num_tokens + row]) for the next launch. scratch: the (free) ring.
template <typename Sync>
__device__ __forceinline__ void MergeSplitsInKernel(const AttentionArgs& a, const StreamPlan& p,
                                                    int row, int active, int tid, int nthreads,
                                                    float* scratch, Sync sync) {
  __shared__ int ticket;
  int* count = a.split_counters + row;
  int* done = a.split_counters + a.batch.num_tokens + row;
  // The partial stores, device-visible before the arrival: a fence in every thread, or
  // (split_release) the barrier and thread 0's release.
  if (!a.split_release) __threadfence();
  sync();
  if (tid == 0) ticket = a.split_release ? AtomicAddAcqRel(count, 1) : atomicAdd(count, 1);
  sync();
  const int hm = max(1, min(p.mergers, active));
  const int k = ticket - (active - hm);
  if (k < 0) return;
  if (tid == 0)
    while (AcquireLoad(count) < active) __nanosleep(32);
  sync();  // every split's partials are visible from here (acquire, then the barrier)
  const int my_heads = (a.heads - k + hm - 1) / hm;  // heads k, k + hm, ...
  const int vecs = a.head_dim / 4;
  const int team_threads = max(vecs, nthreads / max(1, my_heads) / vecs * vecs);
  const int teams = nthreads / team_threads, team = tid / team_threads;
  const int team_floats = 3 * kCombineMaxSplits + 4 * team_threads;  // scratch + red
  float* ts = scratch + team * team_floats;
  float4* red = reinterpret_cast<float4*>(ts + 3 * kCombineMaxSplits);
  for (int r0 = 0; r0 < my_heads; r0 += teams) {  // rounds: every thread, every barrier
    const int idx = r0 + team;
    const bool live = team < teams && idx < my_heads;
    CombineSplitsBlock(a, row, k + (live ? idx : 0) * hm, active, tid % team_threads,
                       team_threads, ts, red, sync, live);
  }
  if (tid == 0 && atomicAdd(done, 1) == hm - 1) *count = 0, *done = 0;
}

struct NoFusion {};  // the unfused kernel's (empty) third parameter

// kFused (ops_fused_attention.h RopeKvWriteAttention, decode_fused.cuh's invariants): the new
// token's rows in `f`; the producer streams only cache keys below the new position (all of
// them before any wait: earlier steps wrote them), each consumer warp prepares its kv head's
// new token after PdlWait (PrepareNewTokenWarp: q rows rotated into the warp's V tile, which
// the key loop overwrites only after the q fragments are loaded), the owner split's first
// warp of the head writes the cache slot and enters the token into its online softmax first.
// kL2 (kFused only): the producer ends with its split's share of AttentionArgs::l2_after;
// its own instantiation, so the kernel without the hint is the code it was.
template <int D, bool kF8, bool kFused = false, bool kL2 = false>
__global__ void __launch_bounds__(kMaxThreads, 1)
    DecodeStreamKernel(const __grid_constant__ AttentionArgs a, const __grid_constant__ StreamPlan p,
                       const __grid_constant__ std::conditional_t<kFused, RopeKvWriteArgs, NoFusion> f) {
  PG_BLOCK_TRACE(kTraceDecodeStream);
  using G = StreamGeo<D, kF8>;
  using KvT = std::conditional_t<kF8, kv::fp8, bf16>;
  extern __shared__ __align__(128) unsigned char smem[];
  const DeviceBatchView& b = a.batch;  // uploaded before the step: readable before PdlWait
  const int s = blockIdx.x;
  if (b.q_len[s] != 1) return;  // a multi-token sequence: another kernel's (block-uniform)
  const int split = blockIdx.y, num_splits = gridDim.y;
  const int active_splits = ActiveSplits(a, s, num_splits);
  if (split >= active_splits) return;  // surplus split of a graph planned for longer contexts
  const SplitRange r = SplitOf(a, s, split, active_splits);
  const int new_pos = b.kv_len[s] - 1;  // written by the previous kernel (RopeKvWrite) / by us
  const bool owner = kFused && r.begin <= new_pos && new_pos < r.end;
  const int kv_end = kFused ? min(r.end, new_pos) : r.end;
  const int tiles = (max(0, kv_end - r.begin) + kTK - 1) / kTK;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t slot_bytes = int64_t(a.kv_heads) * G::kRowBytes;  // one key, every head
  const uint32_t full0 = SmemAddr(smem), empty0 = full0 + kMaxStages * 8;
  const uint32_t ring0 = full0 + kBarBytes;
  if (threadIdx.x == 0) {
    for (int i = 0; i < p.stages; ++i) {
      MbarInit(full0 + 8 * i, 1);                        // the producer's arrive + the bytes
      MbarInit(empty0 + 8 * i, uint32_t(a.kv_heads));    // one reader warp per kv head
    }
    bulk::FenceMbarInit();
  }
  __syncthreads();
  if (!a.pdl_late_trigger) PdlTrigger();

  if (warp == p.consumer_warps) {  // ---- producer ----
    if (lane == 0) {
      const uint64_t policy = EvictFirstPolicy();
      const int32_t* pages = b.page_table + b.page_start[s];
      const int ps = b.page_size;
      const char* kc = static_cast<const char*>(a.k_cache);
      const char* vc = static_cast<const char*>(a.v_cache);
      bool waited = false;
      for (int st = 0; st < 2 * tiles; ++st) {
        const int k0 = r.begin + (st / 2) * kTK, k1 = min(k0 + kTK, kv_end);
        // PdlWait before the first read of the new key (the previous kernel writes it); the
        // keys below it are earlier steps' (readable before the wait).
        if (!waited && k1 > new_pos) PdlWait(), waited = true;
        const int slot = st % p.stages;
        if (st >= p.stages) MbarWait(empty0 + 8 * slot, uint32_t(st / p.stages - 1) & 1u);
        const uint32_t full = full0 + 8 * slot;
        MbarArriveExpectTx(full, uint32_t((k1 - k0) * slot_bytes));
        const uint32_t dst = ring0 + uint32_t(slot) * uint32_t(p.stage_bytes);
        const char* base = st % 2 ? vc : kc;
        for (int k = k0; k < k1;) {  // one copy per page run
          const int off = k % ps, n = min(k1 - k, ps - off);
          BulkLoad(dst + uint32_t((k - k0) * slot_bytes),
                   base + (int64_t(pages[k / ps]) * ps + off) * slot_bytes,
                   uint32_t(n * slot_bytes), full, policy);
          k += n;
        }
      }
      if constexpr (kL2)
        if (s == 0) bulk::PrefetchL2Share(a.l2_after, split, active_splits);
    }
    // The late PDL trigger comes from the consumers (one thread of a block suffices).
    return;
  }

  // ---- consumers ----
  const int head = warp / p.warps_per_head, j = warp % p.warps_per_head;
  const int g = lane / 4, t = lane % 4;
  const int group = a.heads / a.kv_heads;
  const int row = b.q_start[s];
  const int h0 = head * group;
  const unsigned char* ring = smem + kBarBytes;
  uint4* vtile = reinterpret_cast<uint4*>(smem + p.tile_offset + warp * G::kTileBytes);
  const int nthreads = p.consumer_warps * 32;  // the consumers (named barrier 1)
  auto consumer_sync = [nthreads] { asm volatile("bar.sync 1, %0;" ::"r"(nthreads) : "memory"); };
  // The new token's inputs no kernel of the step writes (before the wait).
  [[maybe_unused]] NewTokenInputs<D> nti;
  if constexpr (kFused) nti = LoadNewTokenInputs<D>(f, a, s, row, head);
  PdlWait();  // q (RoPE'd by the previous kernel, unless fused) is visible from here; writes after
  const float qscale = a.logit_scale * (a.softcap > 0.0f ? 1.0f : kLog2e);
  [[maybe_unused]] float new_v[D / 32], new_s0 = 0.0f, new_s1 = 0.0f;
  if constexpr (kFused)
    PrepareNewTokenWarp<D, KvT>(f, row, head, group, owner && j == 0, qscale, a.softcap, nti,
                                reinterpret_cast<bf16*>(vtile), new_v, new_s0, new_s1);

  // Q as A fragments: rows g and g + 8 = heads h0 + g, h0 + g + 8 (zero past the group), in
  // the K vector layout below (decode_mma_util.cuh LoadQFragments).
  uint32_t qa[G::kKc][4];
  {
    const bf16* q = kFused ? reinterpret_cast<const bf16*>(vtile)
                           : a.q + int64_t(row) * a.q_stride + int64_t(h0) * D;
    LoadQFragments<kF8, D, G::kKc, G::kCpv, G::kVe>(qa, q, group, g, t);
  }

  float o[G::kNb][4];
#pragma unroll
  for (int nb = 0; nb < G::kNb; ++nb) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // rows g and g + 8
  if constexpr (kFused) {  // the new token first, in the owner's first warp of the head (p = 1
    // at its own max; l counts it once, in lane t 0, as the quad sum runs at the end)
    if (owner && j == 0) {
#pragma unroll
      for (int nb = 0; nb < G::kNb; ++nb) {
        // v at dims nb * 8 + 2t (+1): lane (nb % 4) * 8 + 2t (+1), register nb / 4.
        const float v0 = __shfl_sync(0xffffffffu, new_v[nb / 4], (nb % 4) * 8 + 2 * t);
        const float v1 = __shfl_sync(0xffffffffu, new_v[nb / 4], (nb % 4) * 8 + 2 * t + 1);
        if (g < group) o[nb][0] = v0, o[nb][1] = v1;
        if (g + 8 < group) o[nb][2] = v0, o[nb][3] = v1;
      }
      if (g < group) m0 = new_s0, l0 = t == 0 ? 1.0f : 0.0f;
      if (g + 8 < group) m1 = new_s1, l1 = t == 0 ? 1.0f : 0.0f;
    }
    __syncwarp();  // every lane's q fragments are loaded before the V tile is overwritten
  }

  for (int i = j; i < tiles; i += p.warps_per_head) {
    const int key0 = r.begin + i * kTK;
    // K: stage 2i. Lane (g, t) reads key g of each 8-key half, 16-byte vectors at bytes
    // v * 64 + t * 16 of the head's row. Rows are slot_bytes (a multiple of 128) apart, so
    // the two keys of an 8-lane phase would hit the same banks: odd keys read the vectors of
    // a pair (v, v + 1) in the other order (conflict-free), a select puts them back.
    const int k_slot = (2 * i) % p.stages, v_slot = (2 * i + 1) % p.stages;
    MbarWait(full0 + 8 * k_slot, uint32_t((2 * i) / p.stages) & 1u);
    const unsigned char* kt = ring + int64_t(k_slot) * p.stage_bytes + head * G::kRowBytes;
    // Each vector pair feeds its MMAs as it arrives (no K tile in registers: 9 warps share
    // an SM sub-partition's registers 3 : 2 : 2 : 2, so a thread has at most 168).
    constexpr int kPair = G::kNvt % 2 == 0 ? 2 : 1;
    const bool odd = (g & 1) != 0 && kPair == 2;
    float sc[2][4];
#pragma unroll
    for (int bb = 0; bb < 2; ++bb) sc[bb][0] = sc[bb][1] = sc[bb][2] = sc[bb][3] = 0.0f;
#pragma unroll
    for (int v = 0; v < G::kNvt; v += kPair)
#pragma unroll
      for (int bb = 0; bb < 2; ++bb) {
        const unsigned char* kp = kt + (bb * 8 + g) * slot_bytes + t * 16;
        uint4 kv[kPair];
        if constexpr (kPair == 2) {
          const uint4 x = *reinterpret_cast<const uint4*>(kp + (v + (odd ? 1 : 0)) * 64);
          const uint4 y = *reinterpret_cast<const uint4*>(kp + (v + (odd ? 0 : 1)) * 64);
          kv[0] = odd ? y : x, kv[1] = odd ? x : y;
        } else {
          kv[0] = *reinterpret_cast<const uint4*>(kp + v * 64);
        }
#pragma unroll
        for (int u = 0; u < kPair; ++u)
#pragma unroll
          for (int sub = 0; sub < G::kCpv; ++sub) {
            uint32_t b0, b1;
            if constexpr (kF8) {
              const uint32_t w = Word(kv[u], sub);  // dims +0..3 as e4m3
              b0 = F8x2ToH2(w), b1 = F8x2ToH2(w >> 16);
            } else {
              b0 = Word(kv[u], 2 * sub), b1 = Word(kv[u], 2 * sub + 1);
            }
            MmaT<kF8>(sc[bb], qa[(v + u) * G::kCpv + sub], b0, b1);
          }
      }
    __syncwarp();
    if (lane == 0) MbarArrive(empty0 + 8 * k_slot);  // this head is done with the K stage

    // Scores to p in log2 units, (m, l, o) updated, p packed (decode_mma_util.cuh).
    uint32_t pa[4];
    SoftmaxTileStep<kF8, G::kNb>(sc, qscale, a.softcap, key0, t, kv_end, m0, m1, l0, l1, o, pa);

    // V: stage 2i + 1 -> the warp's tile [key][chunk ^ key % 8] (16-bit chunks of 8 dims).
    // Lanes kVc * q .. + kVc - 1 copy one key's row (contiguous: conflict-free reads).
    MbarWait(full0 + 8 * v_slot, uint32_t((2 * i + 1) / p.stages) & 1u);
    __syncwarp();  // every lane's ldmatrix of the previous tile is done
    {
      const unsigned char* vt = ring + int64_t(v_slot) * p.stage_bytes + head * G::kRowBytes;
      const int c = lane % G::kVc;
#pragma unroll
      for (int it = 0; it < kTK / G::kVKeys; ++it) {
        const int key = it * G::kVKeys + lane / G::kVc;
        const bool live = key0 + key < kv_end;
        uint4 raw = make_uint4(0, 0, 0, 0);
        if (live) raw = *reinterpret_cast<const uint4*>(vt + key * slot_bytes + c * 16);
        if constexpr (kF8) {  // 16 e4m3 -> two f16 chunks 2c, 2c + 1
          const uint4 w0 = make_uint4(F8x2ToH2(raw.x), F8x2ToH2(raw.x >> 16), F8x2ToH2(raw.y), F8x2ToH2(raw.y >> 16));
          const uint4 w1 = make_uint4(F8x2ToH2(raw.z), F8x2ToH2(raw.z >> 16), F8x2ToH2(raw.w), F8x2ToH2(raw.w >> 16));
          // Lanes c >= 4 store their second chunk first: an 8-lane phase then hits 8
          // different 16-byte bank groups.
          const int sw = (c / 4) & 1;
          vtile[key * G::kNb + ((2 * c + sw) ^ (key % 8))] = sw ? w1 : w0;
          vtile[key * G::kNb + ((2 * c + 1 - sw) ^ (key % 8))] = sw ? w0 : w1;
        } else {
          vtile[key * G::kNb + (c ^ (key % 8))] = raw;
        }
      }
    }
    __syncwarp();  // the tile is complete; the V stage is read
    if (lane == 0) MbarArrive(empty0 + 8 * v_slot);
    const int lk = lane % 8 + ((lane / 8) % 2) * 8;  // ldmatrix row (key) this lane addresses
#pragma unroll
    for (int np = 0; np < G::kNb / 2; ++np) {
      const int chunk = 2 * np + lane / 16;
      uint32_t vb[4];
      mla::Ldmatrix4Trans(vb, vtile + lk * G::kNb + (chunk ^ (lk % 8)));
      MmaT<kF8>(o[2 * np], pa, vb[0], vb[1]);
      MmaT<kF8>(o[2 * np + 1], pa, vb[2], vb[3]);
    }
  }
  if (a.pdl_late_trigger) PdlTrigger();

  // Row sums over the quad.
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, off);
    l1 += __shfl_xor_sync(0xffffffffu, l1, off);
  }
  if (p.warps_per_head > 1) {
    // Warps j > 0 publish (o, m, l) in the ring (free once every consumer is past its last
    // tile: every stage the producer filled has been waited on), warp j = 0 merges.
    consumer_sync();
    float* rec = reinterpret_cast<float*>(smem + kBarBytes);  // [warp][kMergeFloats][32]
    if (j > 0) {
      float* w = rec + warp * G::kMergeFloats * 32 + lane;
#pragma unroll
      for (int nb = 0; nb < G::kNb; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) w[(nb * 4 + e) * 32] = o[nb][e];
      w[(G::kNb * 4 + 0) * 32] = m0, w[(G::kNb * 4 + 1) * 32] = m1;
      w[(G::kNb * 4 + 2) * 32] = l0, w[(G::kNb * 4 + 3) * 32] = l1;
    }
    consumer_sync();
    for (int jj = 1; jj < p.warps_per_head && j == 0; ++jj) {
      const float* w = rec + (warp + jj) * G::kMergeFloats * 32 + lane;
      const float om0 = w[(G::kNb * 4 + 0) * 32], om1 = w[(G::kNb * 4 + 1) * 32];
      const float nm0 = fmaxf(m0, om0), nm1 = fmaxf(m1, om1);
      const float ca0 = Exp2Or0(m0, nm0), cb0 = Exp2Or0(om0, nm0);
      const float ca1 = Exp2Or0(m1, nm1), cb1 = Exp2Or0(om1, nm1);
      l0 = l0 * ca0 + w[(G::kNb * 4 + 2) * 32] * cb0;
      l1 = l1 * ca1 + w[(G::kNb * 4 + 3) * 32] * cb1;
#pragma unroll
      for (int nb = 0; nb < G::kNb; ++nb) {
        o[nb][0] = o[nb][0] * ca0 + w[(nb * 4 + 0) * 32] * cb0;
        o[nb][1] = o[nb][1] * ca0 + w[(nb * 4 + 1) * 32] * cb0;
        o[nb][2] = o[nb][2] * ca1 + w[(nb * 4 + 2) * 32] * cb1;
        o[nb][3] = o[nb][3] * ca1 + w[(nb * 4 + 3) * 32] * cb1;
      }
      m0 = nm0, m1 = nm1;
    }
  }
  // Rows g, g + 8 of the head's query heads: the output (one active split) or the partial.
  if (j == 0)
    StoreWarpRows<D, G::kNb>(a, {row, h0, group, split, num_splits, active_splits}, g, t, m0, m1,
                             l0, l1, o);
  if (active_splits == 1 || p.mergers == 0) return;  // (the combine kernel merges)
  MergeSplitsInKernel(a, p, row, active_splits, int(threadIdx.x), nthreads,
                      reinterpret_cast<float*>(smem + kBarBytes), consumer_sync);
}

// Ring bytes a block asks for (PG_DSTREAM_RING_KB, default 192: one block an SM with the
// V tiles); the stage count is what fits, at least 2.
int RingBudgetBytes() {
  static const int kb = EnvInt("PG_DSTREAM_RING_KB", 192);
  return std::max(8, kb) * 1024;
}

StreamPlan StreamPlanOf(const AttentionArgs& a) {
  StreamPlan p{};
  const int elem = a.kv_type == KvType::kF8E4M3 ? 1 : 2;
  p.stage_bytes = kTK * a.kv_heads * a.head_dim * elem;
  p.warps_per_head = std::max(1, kMaxConsumerWarps / std::max(1, a.kv_heads));
  p.consumer_warps = a.kv_heads * p.warps_per_head;
  const int tile_bytes = kTK * (a.head_dim / 8) * 16;
  // The merges' scratch (in the ring): the warps' records, MergeSplitsInKernel's teams (at
  // most nthreads / (head_dim / 4), each 3 * kCombineMaxSplits floats + its float4s).
  const int nthreads = p.consumer_warps * 32;
  const int merge_bytes = std::max(
      p.warps_per_head > 1 ? p.consumer_warps * (a.head_dim / 2 + 4) * 32 * 4 : 0,
      nthreads / (a.head_dim / 4) * 3 * kCombineMaxSplits * 4 + nthreads * 16);
  const int tiles_bytes = p.consumer_warps * tile_bytes;  // the warps' V tiles
  const int fixed = kBarBytes + tiles_bytes;
  const int max_stages = (kMaxSmem - fixed) / p.stage_bytes;
  p.stages = std::clamp(RingBudgetBytes() / p.stage_bytes, 2, std::min(kMaxStages, max_stages));
  const int ring_bytes = std::max(p.stages * p.stage_bytes, merge_bytes);
  p.tile_offset = kBarBytes + ring_bytes;
  p.smem_bytes = p.tile_offset + tiles_bytes;
  return p;
}

template <int D, bool kF8, bool kFused, bool kL2>
const void* KernelPtr() {
  return reinterpret_cast<const void*>(&DecodeStreamKernel<D, kF8, kFused, kL2>);
}

template <bool kFused, bool kL2 = false>
const void* KernelFor(const AttentionArgs& a) {
  const bool f8 = a.kv_type == KvType::kF8E4M3;
  if (a.head_dim == 64)
    return f8 ? KernelPtr<64, true, kFused, kL2>() : KernelPtr<64, false, kFused, kL2>();
  return f8 ? KernelPtr<128, true, kFused, kL2>() : KernelPtr<128, false, kFused, kL2>();
}

// Resident blocks per SM for this plan (sets the kernel's shared-memory opt-in first, and its
// kL2 twin's, which differs only in the producer's tail; cached per (fused, head_dim, cache
// type, kv_heads): the plan is a function of those and the env knobs). 0: the block does not
// fit an SM (registers, shared memory): StreamSupports says no.
template <bool kFused = false>
int StreamOccupancy(const AttentionArgs& a, const StreamPlan& p) {
  static int cached[2][2][kMaxConsumerWarps + 1] = {};  // occupancy + 1; 0: not asked yet
  int& c = cached[a.head_dim == 128][a.kv_type == KvType::kF8E4M3][a.kv_heads];
  if (c == 0) {
    const void* k = KernelFor<kFused>(a);
    if constexpr (kFused)
      (void)cudaFuncSetAttribute(KernelFor<true, true>(a),
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmem);
    int n = 0;
    if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmem) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, (p.consumer_warps + 1) * 32,
                                                      size_t(p.smem_bytes)) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: clear it for the next launch's check
      n = 0;
    }
    c = n + 1;
  }
  return c - 1;
}

}  // namespace

bool StreamSupports(const AttentionArgs& a) {
  if (a.head_dim != 64 && a.head_dim != 128) return false;
  if (a.kv_heads < 1 || a.kv_heads > kMaxConsumerWarps || a.heads % a.kv_heads != 0) return false;
  const int group = a.heads / a.kv_heads;
  if (group < 1 || group > 16) return false;
  const StreamPlan p = StreamPlanOf(a);
  return p.smem_bytes <= kMaxSmem && p.stages >= 2 && StreamOccupancy(a, p) > 0;
}

int StreamMinSplitKeys() {
  static const int keys = EnvInt("PG_DSTREAM_MIN_SPLIT_KEYS", 64);
  return std::max(kTK, keys);
}

MmaShape StreamLaunchShape(const AttentionArgs& a) {
  const StreamPlan p = StreamPlanOf(a);
  return {1, p.consumer_warps + 1, std::max(1, StreamOccupancy(a, p)), a.heads};
}

int StreamMergers(const AttentionArgs& a, int num_seqs) {
  // Off by default: request 4's harness hung in its first case with the in-kernel merge (the
  // thread-team version) and a loop change (reverted) both on; the cause is not found. The
  // first version (request 3) passed the harness but measured slower at 1K (16.3 vs 11.3 us,
  // 1 x 1K) and only 1.4 us faster at 1 x 32K. PG_DSTREAM_MERGE=1: on (A/B, not verified).
  static const bool on = EnvFlag("PG_DSTREAM_MERGE", false);
  if (!on || a.heads < 2 || num_seqs < 1) return 0;  // counters: 2 per row (<= heads per row)
  const StreamPlan p = StreamPlanOf(a);
  const int capacity = MultiprocessorCount() * std::max(1, StreamOccupancy(a, p));
  return std::clamp((capacity - 1) / num_seqs, 0, a.heads);
}

namespace {

// f: NoFusion, or the new rows (kFused).
template <int D, bool kF8, bool kFused, typename F>
void LaunchOne(const AttentionArgs& a, const StreamPlan& p, int num_seqs, const F& f,
               cudaStream_t stream) {
  (void)StreamOccupancy<kFused>(a, p);  // sets the shared-memory attribute
  const dim3 grid(unsigned(num_seqs), unsigned(a.num_splits));
  const dim3 block(unsigned((p.consumer_warps + 1) * 32));
  if constexpr (kFused)
    if (a.l2_after.ptr != nullptr)  // the kL2 twin (AttentionArgs::l2_after)
      return (void)LaunchPdl(DecodeStreamKernel<D, kF8, true, true>, grid, block,
                             size_t(p.smem_bytes), stream, a, p, f);
  LaunchPdl(DecodeStreamKernel<D, kF8, kFused>, grid, block, size_t(p.smem_bytes), stream, a, p, f);
}

template <bool kFused, typename F>
void LaunchAny(const AttentionArgs& a, const StreamPlan& p, int num_seqs, const F& f,
               cudaStream_t stream) {
  const bool f8 = a.kv_type == KvType::kF8E4M3;
  if (a.head_dim == 64) {
    if (f8) LaunchOne<64, true, kFused>(a, p, num_seqs, f, stream);
    else LaunchOne<64, false, kFused>(a, p, num_seqs, f, stream);
  } else {
    if (f8) LaunchOne<128, true, kFused>(a, p, num_seqs, f, stream);
    else LaunchOne<128, false, kFused>(a, p, num_seqs, f, stream);
  }
}

}  // namespace

bool StreamFusedSupports(const AttentionArgs& a, const RopeKvWriteArgs& rope) {
  // PrepareNewTokenWarp's register layout (decode_fused.cuh NewTokenInputs::fast), its q
  // rows in the warp's V tile (group x head_dim bf16 <= kTK x head_dim 16-bit), and a block
  // that fits.
  const int half = rope.rotary_dim / 2, group = a.heads / std::max(1, a.kv_heads);
  const bool fast = rope.neox ? half % 32 == 0 : rope.rotary_dim % 2 == 0;
  if (!fast || group > kTK || !StreamSupports(a)) return false;
  return StreamOccupancy<true>(a, StreamPlanOf(a)) > 0;
}

void LaunchStreamFused(const AttentionArgs& a, const RopeKvWriteArgs& rope, int num_seqs,
                       cudaStream_t stream) {
  StreamPlan p = StreamPlanOf(a);
  p.mergers = 0;  // the combine kernel merges
  LaunchAny<true>(a, p, num_seqs, rope, stream);
}

void LaunchStream(const AttentionArgs& a, int num_seqs, int mergers, cudaStream_t stream) {
  StreamPlan p = StreamPlanOf(a);
  p.mergers = a.split_counters != nullptr ? mergers : 0;
  LaunchAny<false>(a, p, num_seqs, NoFusion{}, stream);
}

}  // namespace pg::cuda::decode
