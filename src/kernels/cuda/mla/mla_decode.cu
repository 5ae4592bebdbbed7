// Absorbed MLA attention over the paged latent cache (decode, speculative verification).
//
// A block (8 warps) owns kRows = 32 query rows of one sequence — (position, head) pairs, so
// all heads of a decode token, or heads x positions for several query positions — and one
// split of the sequence's keys. It streams the split's latent rows in tiles of kKeys = 32
// tokens (double-buffered cp.async; fp8 tiles are staged as bytes and widened to bf16 with
// their scales), and per tile:
//   S = Q_lat · K^T   [32 rows x 32 keys], K = latent rows (576 = 512 latent + 64 rope);
//                     warp w computes rows (w & 1) * 16 .. +16, keys (w >> 1) * 8 .. +8
//   online softmax    (log2 domain) per row through shared memory
//   O = O * alpha + P · V   V = the first 512 columns of the same latent tile;
//                     warp w owns rows (w & 1) * 16 .. +16, columns (w >> 1) * 128 .. +128
// Every latent tile is read from HBM once per split and serves all the block's rows; the
// row groups of one split run side by side (blockIdx.x fastest), so their tiles come from L2.
// With num_splits > 1 a block writes an unnormalised partial and MlaCombineKernel merges.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/mla/mla_params.h"
#include "kernels/cuda/mla/mma_util.cuh"

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
constexpr float kNoMax = -1e30f;     // running max before any key (finite: no inf - inf)

struct Smem {
  bf16 q[kRows][kLd];
  bf16 k[2][kKeys][kLd];
  float s[kRows][kSLd];
  bf16 p[kRows][kPLd];
  float m[kRows], l[kRows], alpha[kRows];
  int pos[kRows];  // causal limit of the row (-1: not a row of this block)
};
struct SmemFp8 {
  Smem base;
  uint8_t stage[kKeys][kMlaLatent];
};

__device__ __forceinline__ float Fp8ToFloat(uint8_t v) {
  __nv_fp8_e4m3 f;
  f.__x = v;
  return float(f);
}

// Issues the cp.async copies of latent tile [t0, t0 + kKeys) (positions >= k_end zero-filled).
template <bool kFp8>
__device__ __forceinline__ void LoadTile(const MlaDecodeArgs& a, const int32_t* pages, int t0,
                                         int k_end, bf16 (*dst)[kLd], uint8_t (*stage)[kMlaLatent]) {
  const int page_size = a.batch.page_size;
  if constexpr (kFp8) {
    constexpr int kHalfChunks = kMlaHalf / 16;  // 18 chunks of 16 fp8 per half row
    for (int c = threadIdx.x; c < kKeys * 2 * kHalfChunks; c += kThreads) {
      const int j = c / (2 * kHalfChunks), cc = c % (2 * kHalfChunks);
      const int t = t0 + j;
      const bool ok = t < k_end;
      const int64_t slot = ok ? int64_t(pages[t / page_size]) * page_size + t % page_size : 0;
      const bool k_half = cc < kHalfChunks;
      const uint8_t* src = static_cast<const uint8_t*>(k_half ? a.k_cache : a.v_cache) +
                           slot * kMlaHalf + (k_half ? cc : cc - kHalfChunks) * 16;
      CpAsync16(&stage[j][cc * 16], src, ok);
    }
  } else {
    constexpr int kHalfChunks = kMlaHalf / 8;  // 36 chunks of 8 bf16 per half row
    for (int c = threadIdx.x; c < kKeys * kChunks; c += kThreads) {
      const int j = c / kChunks, cc = c % kChunks;
      const int t = t0 + j;
      const bool ok = t < k_end;
      const int64_t slot = ok ? int64_t(pages[t / page_size]) * page_size + t % page_size : 0;
      const bool k_half = cc < kHalfChunks;
      const bf16* src = static_cast<const bf16*>(k_half ? a.k_cache : a.v_cache) +
                        slot * kMlaHalf + (k_half ? cc : cc - kHalfChunks) * 8;
      CpAsync16(&dst[j][cc * 8], src, ok);
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
    const uint32_t lo = PackBf16(Fp8ToFloat(w & 0xff) * sc, Fp8ToFloat((w >> 8) & 0xff) * sc);
    const uint32_t hi = PackBf16(Fp8ToFloat((w >> 16) & 0xff) * sc, Fp8ToFloat(w >> 24) * sc);
    *reinterpret_cast<uint2*>(&dst[j][e]) = make_uint2(lo, hi);
  }
}

template <bool kFp8>
__global__ void __launch_bounds__(kThreads, 1) MlaDecodeKernel(const MlaDecodeArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  uint8_t(*stage)[kMlaLatent] = kFp8 ? reinterpret_cast<SmemFp8*>(smem_raw)->stage : nullptr;

  const DeviceBatchView& b = a.batch;
  const int s = blockIdx.z, split = blockIdx.y;
  const int q_len = b.q_len[s], kv_len = b.kv_len[s];
  const int rows_total = q_len * a.heads;
  const int r0 = blockIdx.x * kRows;
  const int k_begin = split * a.chunk;
  if (r0 >= rows_total || k_begin >= kv_len) return;  // the combine reads no such split
  const int r_last = min(r0 + kRows, rows_total) - 1;
  const int k_end = min(min(kv_len, k_begin + a.chunk), kv_len - q_len + r_last / a.heads + 1);
  const int num_tiles = k_end > k_begin ? (k_end - k_begin + kKeys - 1) / kKeys : 0;
  const int32_t* pages = b.page_table + b.page_start[s];
  // Row r of the block is query row (q_start * heads + r0 + r) of the [tokens, heads] grid.
  const int64_t row_base = int64_t(b.q_start[s]) * a.heads + r0;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t4 = lane % 4;

  // Q rows and the first tile.
  for (int c = tid; c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks, cc = c % kChunks;
    const bool ok = r0 + r < rows_total;
    CpAsync16(&sm.q[r][cc * 8], a.q_lat + (ok ? (row_base + r) * kMlaLatent + cc * 8 : 0), ok);
  }
  if (num_tiles > 0) LoadTile<kFp8>(a, pages, k_begin, k_end, sm.k[0], stage);
  CpAsyncCommit();
  if (tid < kRows) {
    sm.m[tid] = kNoMax;
    sm.l[tid] = 0.0f;
    sm.pos[tid] = r0 + tid < rows_total ? kv_len - q_len + (r0 + tid) / a.heads : -1;
  }
  CpAsyncWaitAll();
  __syncthreads();
  if constexpr (kFp8) {
    if (num_tiles > 0) WidenTile(a, stage, sm.k[0]);
    __syncthreads();
  }

  const int rg = warp & 1;        // row group (16 rows) of this warp
  const int kg = warp >> 1;       // score phase: keys kg*8 .. +8
  const int cq = warp >> 1;       // output phase: columns cq*128 .. +128
  float acc[16][4];
#pragma unroll
  for (int n = 0; n < 16; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

  for (int it = 0; it < num_tiles; ++it) {
    const int buf = it & 1;
    const int t0 = k_begin + it * kKeys;
    if (it + 1 < num_tiles) LoadTile<kFp8>(a, pages, t0 + kKeys, k_end, sm.k[buf ^ 1], stage);
    CpAsyncCommit();

    // ---- scores: rows rg*16..+16 x keys kg*8..+8 over the 576 latent dims
    {
      float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      const bf16* qa = &sm.q[rg * 16 + (lane % 8) + ((lane / 8) % 2) * 8][(lane / 16) * 8];
      const bf16* kb = &sm.k[buf][kg * 8 + (lane % 8)][(lane / 8) * 8];
#pragma unroll 6
      for (int k0 = 0; k0 < kMlaLatent; k0 += 32) {
        uint32_t bb[4], a0[4], a1[4];
        Ldmatrix4(bb, kb + k0);         // b0, b1 of k-step k0; b0, b1 of k-step k0 + 16
        Ldmatrix4(a0, qa + k0);
        Ldmatrix4(a1, qa + k0 + 16);
        Mma(c, a0, bb[0], bb[1]);
        Mma(c, a1, bb[2], bb[3]);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = rg * 16 + g + (e >= 2 ? 8 : 0);
        const int j = kg * 8 + 2 * t4 + (e & 1);
        const int t = t0 + j;
        sm.s[r][j] = (t < k_end && t <= sm.pos[r]) ? c[e] * a.logit_scale_log2 : -INFINITY;
      }
    }
    __syncthreads();

    // ---- online softmax: 8 threads per row, 4 keys each
    {
      const int r = tid / 8, sub = tid % 8;
      float x[4];
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; ++j) mx = fmaxf(mx, x[j] = sm.s[r][sub * 4 + j]);
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
    {
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
#pragma unroll
        for (int n = 0; n < 16; n += 2) {
          uint32_t bb[4];
          Ldmatrix4Trans(bb, vb + n * 8);  // b0, b1 of column tile n; b0, b1 of tile n + 1
          Mma(acc[n], pa, bb[0], bb[1]);
          Mma(acc[n + 1], pa, bb[2], bb[3]);
        }
      }
    }

    CpAsyncWaitAll();
    __syncthreads();
    if constexpr (kFp8) {
      if (it + 1 < num_tiles) WidenTile(a, stage, sm.k[buf ^ 1]);
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

// One block per (token, head) row; 128 threads x 4 columns.
__global__ void __launch_bounds__(128) MlaCombineKernel(const MlaCombineArgs a) {
  const int64_t row = blockIdx.x;
  const int token = int(row / a.heads);
  const int s = a.batch.token_seq[token];
  const int n = min(a.num_splits, (a.batch.kv_len[s] + a.chunk - 1) / a.chunk);
  const float* ml = a.partial_ml + row * a.num_splits * 2;
  float mx = kNoMax;
  for (int i = 0; i < n; ++i) mx = fmaxf(mx, ml[2 * i]);
  float l = 0.0f;
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  const int c = threadIdx.x * 4;
  for (int i = 0; i < n; ++i) {
    const float w = exp2f(ml[2 * i] - mx);
    l += w * ml[2 * i + 1];
    const float4 v =
        *reinterpret_cast<const float4*>(a.partial_acc + (row * a.num_splits + i) * kMlaRank + c);
    o.x += w * v.x, o.y += w * v.y, o.z += w * v.z, o.w += w * v.w;
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  bf16* dst = a.o_lat + row * kMlaRank + c;
  reinterpret_cast<__nv_bfloat162*>(dst)[0] = __floats2bfloat162_rn(o.x * inv, o.y * inv);
  reinterpret_cast<__nv_bfloat162*>(dst)[1] = __floats2bfloat162_rn(o.z * inv, o.w * inv);
}

template <bool kFp8>
void Launch(const MlaDecodeArgs& a, cudaStream_t stream) {
  const size_t smem = kFp8 ? sizeof(SmemFp8) : sizeof(Smem);
  static bool configured = false;  // per specialisation; idempotent, so a race is harmless
  if (!configured) {
    cudaFuncSetAttribute(MlaDecodeKernel<kFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         int(smem));
    configured = true;
  }
  const dim3 grid(a.row_groups, a.num_splits, a.batch.num_seqs);
  MlaDecodeKernel<kFp8><<<grid, kThreads, smem, stream>>>(a);
}

}  // namespace

MlaDecodePlan PlanMlaDecode(int num_seqs, int max_q_len, int max_kv_len, int heads, int num_sms) {
  MlaDecodePlan p{};
  p.row_groups = int((int64_t(std::max(max_q_len, 1)) * heads + kRows - 1) / kRows);
  const int64_t base_blocks = int64_t(std::max(num_seqs, 1)) * p.row_groups;
  const int64_t kv = std::max(max_kv_len, 1);
  int64_t splits = 1;
  if (base_blocks < num_sms)
    splits = std::min<int64_t>((num_sms + base_blocks - 1) / base_blocks, (kv + 2 * kKeys - 1) / (2 * kKeys));
  splits = std::clamp<int64_t>(splits, 1, 256);
  int64_t chunk = (kv + splits - 1) / splits;
  chunk = (chunk + kKeys - 1) / kKeys * kKeys;
  p.chunk = int(chunk);
  p.num_splits = int((kv + chunk - 1) / chunk);
  return p;
}

void LaunchMlaDecode(const MlaDecodeArgs& a, cudaStream_t stream) {
  if (a.batch.num_seqs == 0 || a.row_groups == 0) return;
  if (a.cache_type == MlaCacheType::kFP8) Launch<true>(a, stream);
  else Launch<false>(a, stream);
}

void LaunchMlaCombine(const MlaCombineArgs& a, cudaStream_t stream) {
  const int64_t rows = int64_t(a.batch.num_tokens) * a.heads;
  if (rows == 0) return;
  static_assert(kMlaRank == 128 * 4, "combine: 128 threads x 4 columns");
  MlaCombineKernel<<<unsigned(rows), 128, 0, stream>>>(a);
}

}  // namespace pg::cuda
