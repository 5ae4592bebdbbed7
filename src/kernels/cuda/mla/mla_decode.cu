// Absorbed MLA attention over the paged latent cache (decode, speculative verification).
//
// A block (8 warps) owns kRows = 32 query rows of one sequence — (position, head) pairs, so
// all heads of a decode token, or heads x positions for several query positions — and one
// split of the sequence's keys. It streams the split's latent rows in tiles of kKeys = 32
// tokens (double-buffered cp.async; fp8 tiles are staged as bytes and widened to bf16 with
// their scales), and per tile:
//   S = Q_lat · K^T   [32 rows x 32 keys], K = latent rows (576 = 512 latent + 64 rope);
//                     warp w computes rows (w & 1) * 16 .. +16 x all keys over latent dims
//                     (w >> 1) * 144 .. +144 (short mma chains); the softmax sums the quarters
//   online softmax    (log2 domain) per row through shared memory
//   O = O * alpha + P · V   V = the first 512 columns of the same latent tile;
//                     warp w owns rows (w & 1) * 16 .. +16, columns (w >> 1) * 128 .. +128
// bf16 tiles are triple-buffered (two tiles in flight while one is computed: one block per SM
// needs that much in flight to stream at HBM speed); fp8 tiles double-buffered (one staging
// buffer). Every latent tile is read from HBM once per split and serves all the block's rows; the
// row groups of one split run side by side (blockIdx.x fastest), so their tiles come from L2.
// With num_splits > 1 a block writes an unnormalised partial and MlaCombineKernel (or the fused
// MlaCombineApplyKernel, mla_fused.cu) merges. A split's key range comes from the sequence's
// kv_len on the device (MlaSplitChunk), so one captured graph serves every length.
// Both kernels are launched with PDL (common/pdl.cuh): they wait before their first read.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>

#include "core/env.h"
#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/mla/mla_params.h"
#include "kernels/cuda/mla/mma_util.cuh"
#include "kernels/cuda/mla/split_merge.cuh"

namespace pg::cuda {
namespace {

using namespace mla;

constexpr int kRows = 32;
constexpr int kKeys = 32;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kLd = kMlaLatent + 8;  // smem row stride (bf16): 1168 bytes, conflict-free ldmatrix
constexpr int kSLd = kKeys + 1;      // score row stride (f32)
constexpr int kPLd = kKeys + 8;      // probability row stride (bf16): 80 bytes
constexpr int kChunks = kMlaLatent / 8;  // 16-byte chunks per bf16 latent row (72)
constexpr int kKq = kMlaLatent / 4;      // latent dims per score warp (144 = 9 k-steps)
constexpr int kQSteps = kKq / 16;

constexpr int kMaxStages = 3;
template <bool kFp8>
inline constexpr int kStages = kFp8 ? 2 : 3;  // latent tile buffers (tiles in flight + 1)

struct Smem {
  bf16 q[kRows][kLd];
  bf16 k[kMaxStages][kKeys][kLd];
  float s[4][kRows][kSLd];  // partial scores of the 4 k-quarters
  bf16 p[kRows][kPLd];
  float m[kRows], l[kRows], alpha[kRows];
  int pos[kRows];  // causal limit of the row (-1: not a row of this block)
  int64_t slot[kMaxStages][kKeys];  // cache slots of the next tiles' keys (tile i: slot[i % S])
};
struct SmemFp8 {
  Smem base;
  uint8_t stage[kKeys][kMlaLatent];
};

// Two fp8 e4m3 (low byte first) -> two floats.
__device__ __forceinline__ float2 Fp8x2ToFloat2(uint16_t v) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(v), __NV_E4M3);
  return __half22float2(__half2(h));
}

// Cache slot (page * page_size + offset) of key position t; -1 past k_end. Slots are looked up
// one tile ahead by 32 threads (one page-table read per key row, not one per 16-byte chunk).
__device__ __forceinline__ int64_t SlotOf(const int32_t* pages, int page_size, int t, int k_end) {
  return t < k_end ? int64_t(pages[t / page_size]) * page_size + t % page_size : -1;
}

// Issues the cp.async copies of one latent tile (rows with slot -1 zero-filled); only rows j
// with (j < split_row) == before when split_row >= 0 (tile 0 loads its rows of earlier steps'
// keys before PdlWait, the rows of this step's keys after it).
template <bool kFp8>
__device__ __forceinline__ void LoadTile(const MlaDecodeArgs& a, const int64_t* slots,
                                         bf16 (*dst)[kLd], uint8_t (*stage)[kMlaLatent],
                                         int split_row = -1, bool before = true) {
  if constexpr (kFp8) {
    constexpr int kHalfChunks = kMlaHalf / 16;  // 18 chunks of 16 fp8 per half row
    constexpr int kTotal = kKeys * 2 * kHalfChunks;
#pragma unroll
    for (int i = 0; i < (kTotal + kThreads - 1) / kThreads; ++i) {
      const int c = threadIdx.x + i * kThreads;
      if (c >= kTotal) break;
      const int j = c / (2 * kHalfChunks), cc = c % (2 * kHalfChunks);
      if (split_row >= 0 && (j < split_row) != before) continue;
      const int64_t slot = slots[j];
      const bool k_half = cc < kHalfChunks;
      const uint8_t* src = static_cast<const uint8_t*>(k_half ? a.k_cache : a.v_cache) +
                           (slot < 0 ? 0 : slot) * kMlaHalf + (k_half ? cc : cc - kHalfChunks) * 16;
      CpAsync16(&stage[j][cc * 16], src, slot >= 0);
    }
  } else {
    constexpr int kHalfChunks = kMlaHalf / 8;  // 36 chunks of 8 bf16 per half row
    static_assert(kKeys * kChunks % kThreads == 0, "whole load rounds");
#pragma unroll
    for (int i = 0; i < kKeys * kChunks / kThreads; ++i) {
      const int c = threadIdx.x + i * kThreads;
      const int j = c / kChunks, cc = c % kChunks;
      if (split_row >= 0 && (j < split_row) != before) continue;
      const int64_t slot = slots[j];
      const bool k_half = cc < kHalfChunks;
      const bf16* src = static_cast<const bf16*>(k_half ? a.k_cache : a.v_cache) +
                        (slot < 0 ? 0 : slot) * kMlaHalf + (k_half ? cc : cc - kHalfChunks) * 8;
      CpAsync16(&dst[j][cc * 8], src, slot >= 0);
    }
  }
}

// fp8 stage -> bf16 tile, real values (stored * scale of the half).
__device__ __forceinline__ void WidenTile(const MlaDecodeArgs& a, const uint8_t (*stage)[kMlaLatent],
                                          bf16 (*dst)[kLd]) {
  for (int c = threadIdx.x; c < kKeys * kMlaLatent / 4; c += kThreads) {
    const int j = c / (kMlaLatent / 4), e = (c % (kMlaLatent / 4)) * 4;
    const float sc = e < kMlaHalf ? a.k_scale : a.v_scale;  // kMlaHalf % 4 == 0
    const uint32_t w = *reinterpret_cast<const uint32_t*>(&stage[j][e]);
    const float2 f01 = Fp8x2ToFloat2(uint16_t(w & 0xffff));  // paired hardware conversions
    const float2 f23 = Fp8x2ToFloat2(uint16_t(w >> 16));
    const uint32_t lo = PackBf16(f01.x * sc, f01.y * sc);
    const uint32_t hi = PackBf16(f23.x * sc, f23.y * sc);
    *reinterpret_cast<uint2*>(&dst[j][e]) = make_uint2(lo, hi);
  }
}

// Registers: capped (kSlim; off by default, PEREGRINE_MLA_SLIM=1) at kMlaDecodeRegs so that a
// decode block leaves room in the SM's register file (64K) for a q-absorb block (64 x 256 threads) or a merge + W_UV
// block (kMlaApplyRegs x 256) beside it: PDL can then start the decode's prologue (page table,
// first tiles) while q-absorb still runs, and merge + W_UV's weight loads while the decode
// runs. Uncapped it takes 196 and nothing fits beside it. No spills at the cap (ptxas), but
// measured slower on the H200 (V2-Lite b1 step 1916 -> 1949 us at 1K, 2096 -> 2178 at 8K;
// docs/PERF.md "CUDA MLA"), so the uncapped kernels are the default.
template <bool kFp8, bool kSlim>
__global__ void __launch_bounds__(kThreads, 1) __maxnreg__(kSlim ? kMlaDecodeRegs : 255)
    MlaDecodeKernel(const MlaDecodeArgs a) {
  PG_BLOCK_TRACE(kTraceMlaDecode);
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  uint8_t(*stage)[kMlaLatent] = kFp8 ? reinterpret_cast<SmemFp8*>(smem_raw)->stage : nullptr;

  // Before PdlWait this kernel reads only the batch plan (uploaded by the host before the
  // step; no kernel of the step writes it) and latent rows of keys older than the step's new
  // tokens (written by earlier steps); q_lat and the new rows are read after it.
  const DeviceBatchView& b = a.batch;
  const int s = blockIdx.z, split = blockIdx.y;
  const int q_len = b.q_len[s], kv_len = b.kv_len[s];
  const int chunk = MlaSplitChunk(kv_len, a.num_splits, a.min_chunk);
  const int rows_total = q_len * a.heads;
  const int r0 = blockIdx.x * kRows;
  const int k_begin = split * chunk;
  if (r0 >= rows_total || k_begin >= kv_len) return;  // the combine reads no such split
  const int r_last = min(r0 + kRows, rows_total) - 1;
  const int k_end = min(min(kv_len, k_begin + chunk), kv_len - q_len + r_last / a.heads + 1);
  const int num_tiles = k_end > k_begin ? (k_end - k_begin + kKeys - 1) / kKeys : 0;
  const int32_t* pages = b.page_table + b.page_start[s];
  // Row r of the block is query row (q_start * heads + r0 + r) of the [tokens, heads] grid.
  const int64_t row_base = int64_t(b.q_start[s]) * a.heads + r0;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t4 = lane % 4;

  constexpr int S = kStages<kFp8>;
  // Slots of tiles 0 .. S-1, then Q rows and the first tiles.
  if (tid < kKeys)
#pragma unroll
    for (int i = 0; i < S; ++i) sm.slot[i][tid] = SlotOf(pages, b.page_size, k_begin + i * kKeys + tid, k_end);
  __syncthreads();
  // Tiles 0 (and 1 when triple-buffered): rows of earlier steps' keys now, this step's
  // (row >= new_row) after PdlWait.
  const int new_row = min(max(kv_len - q_len - k_begin, 0), kKeys);
  const int new_row1 = min(max(kv_len - q_len - k_begin - kKeys, 0), kKeys);
  if (num_tiles > 0) LoadTile<kFp8>(a, sm.slot[0], sm.k[0], stage, new_row, true);
  if constexpr (S == 3) {
    if (num_tiles > 1) LoadTile<kFp8>(a, sm.slot[1], sm.k[1], stage, new_row1, true);
  }
  CpAsyncCommit();
  PdlWait();
  PdlTrigger();  // the combine may launch now (and stream its weights meanwhile)
  for (int c = tid; c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks, cc = c % kChunks;
    const bool ok = r0 + r < rows_total;
    CpAsync16(&sm.q[r][cc * 8], a.q_lat + (ok ? (row_base + r) * kMlaLatent + cc * 8 : 0), ok);
  }
  if (num_tiles > 0 && new_row < kKeys) LoadTile<kFp8>(a, sm.slot[0], sm.k[0], stage, new_row, false);
  CpAsyncCommit();
  if constexpr (S == 3) {  // tile 1 in flight too
    if (num_tiles > 1 && new_row1 < kKeys) LoadTile<kFp8>(a, sm.slot[1], sm.k[1], stage, new_row1, false);
    CpAsyncCommit();
  }
  if (tid < kRows) {
    sm.m[tid] = kMlaNoMax;
    sm.l[tid] = 0.0f;
    sm.pos[tid] = r0 + tid < rows_total ? kv_len - q_len + (r0 + tid) / a.heads : -1;
  }
  CpAsyncWaitGroup<S - 2>();  // Q and tile 0 (tile 1 may still be in flight)
  __syncthreads();
  if constexpr (kFp8) {
    if (num_tiles > 0) WidenTile(a, stage, sm.k[0]);
    __syncthreads();
  }

  const int rg = warp & 1;        // row group (16 rows) of this warp
  const int kq = warp >> 1;       // score phase: latent dims kq*kKq .. +kKq
  const int cq = warp >> 1;       // output phase: columns cq*128 .. +128
  float acc[16][4];
#pragma unroll
  for (int n = 0; n < 16; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  // Warps whose 16 rows are all past the sequence's rows (16-head models at q_len 1) skip
  // their mma (warp-uniform); the softmax masks those rows whatever their scores hold.
  const bool rows_active = r0 + rg * 16 < rows_total;
  // This warp's Q fragments (rows rg*16..+16, dims kq*kKq..+kKq), loaded once.
  uint32_t qf[kQSteps][4];
  {
    const bf16* qa = &sm.q[rg * 16 + (lane % 8) + ((lane / 8) % 2) * 8][kq * kKq + (lane / 16) * 8];
#pragma unroll
    for (int step = 0; step < kQSteps; ++step) Ldmatrix4(qf[step], qa + step * 16);
  }

  for (int it = 0; it < num_tiles; ++it) {
    const int buf = it % S, nxt = it + S - 1;
    const int t0 = k_begin + it * kKeys;
    if (nxt < num_tiles) LoadTile<kFp8>(a, sm.slot[nxt % S], sm.k[nxt % S], stage);
    CpAsyncCommit();
    // Tile it's slots are spent: look up tile it + S's (read after the barriers below).
    if (tid < kKeys) sm.slot[buf][tid] = SlotOf(pages, b.page_size, t0 + S * kKeys + tid, k_end);

    // ---- scores: warp (rg, kq) computes rows rg*16..+16 x all 32 keys over latent dims
    // kq*144..+144 (4 independent accumulators, short dependency chains); the 4 k-quarters
    // are summed by the softmax.
    if (rows_active) {
      float c[kKeys / 8][4];
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.0f;
      const int kbase = kq * kKq;
      const bf16* kb = &sm.k[buf][(lane % 8) + (lane / 16) * 8][kbase + ((lane / 8) % 2) * 8];
      // K fragments of k-step i + 1 load while the mma of k-step i run (double-buffered);
      // the Q fragments stay in registers for the whole block.
      uint32_t b01[2][4], b23[2][4];
      auto load = [&](int buf2, int step) {
        Ldmatrix4(b01[buf2], kb + step * 16);             // b0, b1 of key tiles 0 and 1
        Ldmatrix4(b23[buf2], kb + 16 * kLd + step * 16);  // key tiles 2 and 3
      };
      load(0, 0);
#pragma unroll
      for (int step = 0; step < kQSteps; ++step) {
        const int cur = step & 1;
        if (step + 1 < kQSteps) load(cur ^ 1, step + 1);
        Mma(c[0], qf[step], b01[cur][0], b01[cur][1]);
        Mma(c[1], qf[step], b01[cur][2], b01[cur][3]);
        Mma(c[2], qf[step], b23[cur][0], b23[cur][1]);
        Mma(c[3], qf[step], b23[cur][2], b23[cur][3]);
      }
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          sm.s[kq][rg * 16 + g + (e >= 2 ? 8 : 0)][n * 8 + 2 * t4 + (e & 1)] = c[n][e];
    }
    __syncthreads();

    // ---- online softmax: 8 threads per row, 4 keys each
    {
      const int r = tid / 8, sub = tid % 8;
      float x[4];
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int key = sub * 4 + j, t = t0 + key;
        const float dot = sm.s[0][r][key] + sm.s[1][r][key] + sm.s[2][r][key] + sm.s[3][r][key];
        x[j] = (t < k_end && t <= sm.pos[r]) ? dot * a.logit_scale_log2 : -INFINITY;
        mx = fmaxf(mx, x[j]);
      }
#pragma unroll
      for (int o = 1; o < 8; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = sm.m[r];
      const float m_new = fmaxf(m_old, mx);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float pj = exp2f(x[j] - m_new);
        sum += pj;
        sm.p[r][sub * 4 + j] = __float2bfloat16_rn(pj);
      }
#pragma unroll
      for (int o = 1; o < 8; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      __syncwarp();
      if (sub == 0) {
        const float alpha = exp2f(m_old - m_new);
        sm.alpha[r] = alpha;
        sm.m[r] = m_new;
        sm.l[r] = sm.l[r] * alpha + sum;
      }
    }
    __syncthreads();

    // ---- output: rows rg*16..+16 x columns cq*128..+128 += P (32 keys) · V
    if (rows_active) {
      const float al0 = sm.alpha[rg * 16 + g], al1 = sm.alpha[rg * 16 + g + 8];
#pragma unroll
      for (int n = 0; n < 16; ++n) {
        acc[n][0] *= al0, acc[n][1] *= al0;
        acc[n][2] *= al1, acc[n][3] *= al1;
      }
#pragma unroll
      for (int kk = 0; kk < kKeys; kk += 16) {
        uint32_t pa[4];
        Ldmatrix4(pa, &sm.p[rg * 16 + (lane % 8) + ((lane / 8) % 2) * 8][kk + (lane / 16) * 8]);
        const bf16* vb = &sm.k[buf][kk + (lane % 8) + ((lane / 8) % 2) * 8][cq * 128 + (lane / 16) * 8];
        uint32_t bb[8][4];  // all fragments first: the loads overlap, then 16 mma
#pragma unroll
        for (int n = 0; n < 16; n += 2)
          Ldmatrix4Trans(bb[n / 2], vb + n * 8);  // b0, b1 of column tile n; b0, b1 of n + 1
#pragma unroll
        for (int n = 0; n < 16; n += 2) {
          Mma(acc[n], pa, bb[n / 2][0], bb[n / 2][1]);
          Mma(acc[n + 1], pa, bb[n / 2][2], bb[n / 2][3]);
        }
      }
    }

    CpAsyncWaitGroup<S - 2>();  // tile it + 1 has landed (it + 2 may be in flight)
    __syncthreads();
    if constexpr (kFp8) {
      if (it + 1 < num_tiles) WidenTile(a, stage, sm.k[(it + 1) % S]);
      __syncthreads();
    }
  }

  // ---- write: rows rg*16 + g (+8), columns cq*128 + n*8 + 2*t4 (+1)
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = rg * 16 + g + half * 8;
    if (r0 + r >= rows_total) continue;
    const int64_t row = row_base + r;
    if (a.num_splits == 1) {
      const float l = sm.l[r];
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      bf16* o = a.o_lat + row * kMlaRank + cq * 128 + 2 * t4;
#pragma unroll
      for (int n = 0; n < 16; ++n)
        *reinterpret_cast<__nv_bfloat162*>(o + n * 8) =
            __floats2bfloat162_rn(acc[n][2 * half] * inv, acc[n][2 * half + 1] * inv);
    } else {
      const int64_t ps = row * a.num_splits + split;
      float* o = a.partial_acc + ps * kMlaRank + cq * 128 + 2 * t4;
#pragma unroll
      for (int n = 0; n < 16; ++n)
        *reinterpret_cast<float2*>(o + n * 8) = make_float2(acc[n][2 * half], acc[n][2 * half + 1]);
      if (cq == 0 && t4 == 0) {
        a.partial_ml[ps * 2] = sm.m[r];
        a.partial_ml[ps * 2 + 1] = sm.l[r];
      }
    }
  }
}

// One block per (token, head) row, 4 warps: warp w merges splits w, w + 4, ... (MlaMergeWarp:
// lane holds 4 float4 columns, a group of splits loaded at once), so a row with many splits
// (batch 1, long context) has many loads in flight instead of a serial walk; the 4 warps'
// results meet in shared memory.
__global__ void __launch_bounds__(128) MlaCombineKernel(const MlaCombineArgs a) {
  PG_BLOCK_TRACE(kTraceMlaCombine);
  __shared__ __align__(16) float red[4][kMlaRank];
  __shared__ float m_s[4], l_s[4];
  const int64_t row = blockIdx.x;
  const int token = int(row / a.heads);
  const int s = a.batch.token_seq[token];  // the batch plan: readable before PdlWait
  const int kv_len = a.batch.kv_len[s];
  const int n = MlaUsedSplits(kv_len, a.num_splits, a.min_chunk);
  PdlWait();
  PdlTrigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float4 acc[4];
  float m, l;
  MlaMergeWarp(a.partial_ml + row * a.num_splits * 2, a.partial_acc + row * a.num_splits * kMlaRank,
               n, warp, 4, lane, acc, m, l);
#pragma unroll
  for (int q = 0; q < 4; ++q) reinterpret_cast<float4*>(red[warp])[q * 32 + lane] = acc[q];
  if (lane == 0) m_s[warp] = m, l_s[warp] = l;
  __syncthreads();
  const int c = threadIdx.x * 4;
  float o[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) o[e] = MlaMergeWarps(&red[0][0], m_s, l_s, 4, c + e);
  bf16* dst = a.o_lat + row * kMlaRank + c;
  reinterpret_cast<__nv_bfloat162*>(dst)[0] = __floats2bfloat162_rn(o[0], o[1]);
  reinterpret_cast<__nv_bfloat162*>(dst)[1] = __floats2bfloat162_rn(o[2], o[3]);
}

template <bool kFp8, bool kSlim>
void Launch(const MlaDecodeArgs& a, cudaStream_t stream) {
  const size_t smem = kFp8 ? sizeof(SmemFp8) : sizeof(Smem);
  static bool configured = false;  // per specialisation; idempotent, so a race is harmless
  if (!configured) {
    cudaFuncSetAttribute(MlaDecodeKernel<kFp8, kSlim>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         int(smem));
    if (EnvFlag("PEREGRINE_MLA_CARVEOUT", false))  // A/B knob (mla_fused.cu MaybeMaxCarveout)
      cudaFuncSetAttribute(MlaDecodeKernel<kFp8, kSlim>,
                           cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    configured = true;
  }
  const dim3 grid(a.row_groups, a.num_splits, a.batch.num_seqs);
  LaunchPdl(MlaDecodeKernel<kFp8, kSlim>, grid, dim3(kThreads), smem, stream, a);
}

}  // namespace

bool MlaSlimRegisters() { return EnvFlag("PEREGRINE_MLA_SLIM", false); }

MlaDecodePlan PlanMlaDecode(int num_seqs, int max_q_len, int max_kv_len, int heads, int num_sms) {
  MlaDecodePlan p{};
  static const int min_tiles = std::clamp(EnvInt("PEREGRINE_MLA_MIN_TILES", kMlaMinChunk / kKeys), 1, 2);
  p.min_chunk = min_tiles * kKeys;
  p.row_groups = int((int64_t(std::max(max_q_len, 1)) * heads + kRows - 1) / kRows);
  const int64_t base_blocks = int64_t(std::max(num_seqs, 1)) * p.row_groups;
  const int64_t kv = std::max(max_kv_len, 1);
  // One block per SM (shared memory), so at most one wave: floor, not ceil (a second wave of
  // a few blocks doubles the time; measured on the H200, docs/PERF.md "CUDA MLA").
  int64_t splits = 1;
  if (base_blocks < num_sms)
    splits = std::min<int64_t>(num_sms / base_blocks, (kv + p.min_chunk - 1) / p.min_chunk);
  splits = std::clamp<int64_t>(splits, 1, 256);
  // Splits the longest sequence actually fills (MlaSplitChunk rounds chunks up to tiles).
  const int chunk = MlaSplitChunk(int(kv), int(splits), p.min_chunk);
  p.num_splits = int((kv + chunk - 1) / chunk);
  return p;
}

void LaunchMlaDecode(const MlaDecodeArgs& a, cudaStream_t stream) {
  if (a.batch.num_seqs == 0 || a.row_groups == 0) return;
  static const bool slim = MlaSlimRegisters();
  if (a.cache_type == MlaCacheType::kFP8) slim ? Launch<true, true>(a, stream) : Launch<true, false>(a, stream);
  else slim ? Launch<false, true>(a, stream) : Launch<false, false>(a, stream);
}

void LaunchMlaCombine(const MlaCombineArgs& a, cudaStream_t stream) {
  const int64_t rows = int64_t(a.batch.num_tokens) * a.heads;
  if (rows == 0) return;
  static_assert(kMlaRank == 128 * 4, "combine: 128 threads x 4 columns");
  LaunchPdl(MlaCombineKernel, dim3(unsigned(rows)), dim3(128), 0, stream, a);
}

}  // namespace pg::cuda
