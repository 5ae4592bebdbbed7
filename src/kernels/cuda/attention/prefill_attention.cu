// Tensor-core paged prefill attention; see prefill_attention.h for the work decomposition.
//
// Per block (kWarps = 4 warps, BM = 16 * kMT * kWarps packed query rows: warp w owns kMT
// m-tiles of 16 rows; kMT = 1 -> 64-row tiles, kMT = 2 -> 128-row tiles):
//   shared: sQ [BM][D], sK/sV [kStages][kBlockN][D] (bf16, 2-3 K/V tiles in flight;
//   fp8 caches add the raw e4m3 tiles, widened per thread into sK/sV).
//   Rows of D bf16 are 16-byte chunks stored at chunk ^ (row & 7) (XOR swizzle) so that the
//   8 row addresses of every ldmatrix hit distinct banks.
//   registers per warp: scores S [kMT][kBlockN/8][4] f32, O [kMT][D/8][4] f32; Q fragments
//   are re-read from shared memory per 32-wide slice of D. A K or V fragment (ldmatrix) feeds
//   kMT m-tiles: with kMT = 2 the shared-memory traffic per MMA halves (FA2's 128-row tile).
// mma.sync m16n8k16 (row.col, bf16 in, f32 accumulate) fragment layout, g = lane / 4,
// t = lane % 4: A regs {(g, 2t), (g+8, 2t), (g, 2t+8), (g+8, 2t+8)} (pairs of bf16);
// B regs {(k 2t, n g), (k 2t+8, n g)}; C {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}.
// S = Q K^T takes K rows (keys) as B directly (ldmatrix); O += P V takes V through
// ldmatrix.trans and P straight from S's accumulators (the C layout of two n-tiles is the A
// layout of one k-step).
// Scores live in the log2 domain (scale * log2(e) folded in), so the softmax uses ex2.
#include "core/env.h"
#include "kernels/cuda/attention/prefill_attention.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "kernels/cuda/attention/kv_types.cuh"
#include "kernels/cuda/attention/prefill_common.cuh"
#include "kernels/cuda/attention/prefill_wgmma.h"

namespace pg::cuda {
namespace {

using prefill::CpAsync16;
using prefill::CpAsyncCommit;
using prefill::CpAsyncWait;
using prefill::Exp2;
using prefill::PackBf16;
using prefill::SmemAddr;

constexpr int kBlockN = 64;  // keys per tile; split chunks are multiples of it
constexpr int kWarps = 4;    // per block; warp w owns packed rows [16 kMT w, 16 kMT (w + 1))
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ void Ldsm4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void Ldsm4T(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a * b (m16n8k16, bf16 inputs, f32 accumulators).
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// K/V tiles in flight: 3 stages where two blocks per SM still fit (64-row tiles, bf16
// caches: 112 KiB at D = 128), else 2.
template <int D, int kMT, bool kFp8>
__host__ __device__ constexpr int Stages() {
  return kFp8 || kMT > 1 ? 2 : 3;
}
// Shared-memory bytes of a specialisation: sQ, sK/sV per stage (bf16), and for fp8 caches the
// raw fp8 K/V tiles per stage that each thread widens into sK/sV.
template <int D, int kMT, bool kFp8>
constexpr int SmemBytes() {
  constexpr int S = Stages<D, kMT, kFp8>();
  return (16 * kMT * kWarps + 2 * S * kBlockN) * D * 2 + (kFp8 ? 2 * S * kBlockN * D : 0);
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled [rows][D] bf16 tile.
template <int D>
__device__ __forceinline__ uint32_t TileOffset(int row, int chunk) {
  return uint32_t(row * D * 2 + ((chunk ^ (row & 7)) << 4));
}

// kFp8: the cache holds e4m3 (value / scale; the scales are folded into logit_scale and
// v_scale), widened to bf16 (exact) in shared memory.
template <int D, int kMT, bool kFp8>
__global__ void __launch_bounds__(kWarps * 32) PrefillKernel(const PrefillAttentionArgs a) {
  constexpr int BM = 16 * kMT * kWarps;
  constexpr int kThreads = kWarps * 32;
  constexpr int kChunks = D / 8;  // 16-byte chunks per bf16 row
  constexpr int kTileBytes = kBlockN * D * 2;
  constexpr int kChunks8 = D / 16;  // 16-byte chunks per fp8 row
  constexpr int kTileBytes8 = kBlockN * D;
  static_assert(kThreads % kChunks == 0, "a thread keeps one chunk column");
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = SmemAddr(smem);
  const uint32_t sK = sQ + BM * D * 2;          // [2][kBlockN][D]
  constexpr int kStages = Stages<D, kMT, kFp8>();
  const uint32_t sV = sK + kStages * kTileBytes;      // [kStages][kBlockN][D]
  const uint32_t sK8 = sV + kStages * kTileBytes;     // fp8: [kStages][kBlockN][D] bytes, unswizzled
  const uint32_t sV8 = sK8 + kStages * kTileBytes8;
  unsigned char* const smem_k8 = smem + (BM * D * 2 + 2 * kStages * kTileBytes);
  unsigned char* const smem_v8 = smem_k8 + kStages * kTileBytes8;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kvh = blockIdx.y, split = blockIdx.z;
  const DeviceBatchView& b = a.batch;
  const int group = a.heads / a.kv_heads;

  const prefill::BlockWork w = prefill::FindBlockWork(a, BM);
  if (w.tile < 0) return;
  const int s = w.seq, q0 = w.q0, prefix = w.prefix;
  const int row0 = w.row0, rows = w.rows, pos_first = w.pos_first, pos_last = w.pos_last;
  const int key_hi = w.key_hi;
  const int t_begin = w.key_lo / kBlockN;
  const int num_kv_tiles = w.key_hi > w.key_lo ? (w.key_hi + kBlockN - 1) / kBlockN - t_begin : 0;
  const int32_t* pages = b.page_table + b.page_start[s];
  const int64_t slot_stride = int64_t(a.kv_heads) * D;  // elements between token slots

  // Loads: a thread keeps chunk column c and walks rows r0, r0 + kRowStep, ...
  constexpr int kRowStep = kThreads / kChunks;
  const int c = threadIdx.x % kChunks, r_first = threadIdx.x / kChunks;
  for (int r = r_first; r < BM; r += kRowStep) {
    const bool valid = r < rows;
    const int pr = row0 + (valid ? r : 0);
    const int tok = pr / group, g = pr % group;
    const bf16* src = a.q + int64_t(q0 + tok) * a.q_stride + int64_t(kvh * group + g) * D + c * 8;
    CpAsync16(sQ + TileOffset<D>(r, c), src, valid);
  }
  // K/V tiles: warp w copies tile rows [16w, 16w + 16). Lane l finds the cache slot of row
  // 16w + l % 16 once per tile (page-table read, division); the lanes copying a row take its
  // offset from that lane by shuffle. kLanes lanes copy one row (16 bytes each: D/8 lanes of
  // bf16, D/16 of fp8); fp8 rows go to the staging tiles and are widened by the same lanes.
  constexpr int kLanes = kFp8 ? kChunks8 : kChunks;
  constexpr int kRowsPerStep = 32 / kLanes;
  static_assert(kBlockN == 16 * kWarps && 16 % kRowsPerStep == 0, "a warp copies 16 rows");
  const int sub = lane / kLanes, cc = lane % kLanes;
  const int ps = b.page_size;
  const int ps_shift = (ps & (ps - 1)) == 0 ? __ffs(ps) - 1 : -1;  // power-of-two pages
  auto load_kv = [&](int kt, int buf) {
    const int tok = kt * kBlockN + warp * 16 + (lane & 15);
    int64_t my_off = -1;  // past key_hi: causally masked for every row; zero-filled, not read
    if (tok < key_hi) {
      const int pi = ps_shift >= 0 ? tok >> ps_shift : tok / ps;
      const int slot = tok - pi * ps;
      my_off = (int64_t(pages[pi]) * ps + slot) * slot_stride + int64_t(kvh) * D;
    }
#pragma unroll
    for (int st = 0; st < 16 / kRowsPerStep; ++st) {
      const int rr = st * kRowsPerStep + sub;  // row within the warp's 16
      const int64_t off = __shfl_sync(0xffffffffu, my_off, rr);
      const bool valid = off >= 0;
      const int r = warp * 16 + rr;
      if constexpr (kFp8) {
        const int64_t src = valid ? off + cc * 16 : 0;
        const uint32_t o = uint32_t(buf * kTileBytes8 + r * D + cc * 16);
        CpAsync16(sK8 + o, static_cast<const unsigned char*>(a.k_cache) + src, valid);
        CpAsync16(sV8 + o, static_cast<const unsigned char*>(a.v_cache) + src, valid);
      } else {
        const int64_t src = valid ? off + cc * 8 : 0;
        const uint32_t o = uint32_t(buf * kTileBytes) + TileOffset<D>(r, cc);
        CpAsync16(sK + o, static_cast<const bf16*>(a.k_cache) + src, valid);
        CpAsync16(sV + o, static_cast<const bf16*>(a.v_cache) + src, valid);
      }
    }
  };
  // fp8: widens this lane's own copies of tile `buf` (complete after its wait_group; no
  // barrier needed before) into the bf16 tiles (zero-filled rows stay zero).
  auto widen_kv = [&](int buf) {
#pragma unroll
    for (int st = 0; st < 16 / kRowsPerStep; ++st) {
      const int r = warp * 16 + st * kRowsPerStep + sub;
      const int o8 = buf * kTileBytes8 + r * D + cc * 16;
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const uint4 raw = *reinterpret_cast<const uint4*>((m == 0 ? smem_k8 : smem_v8) + o8);
        float f[16];
        kv::Traits<kv::fp8>::Widen(raw, f);
        uint4 lo, hi;
        lo.x = PackBf16(f[0], f[1]), lo.y = PackBf16(f[2], f[3]);
        lo.z = PackBf16(f[4], f[5]), lo.w = PackBf16(f[6], f[7]);
        hi.x = PackBf16(f[8], f[9]), hi.y = PackBf16(f[10], f[11]);
        hi.z = PackBf16(f[12], f[13]), hi.w = PackBf16(f[14], f[15]);
        unsigned char* tile = smem + BM * D * 2 + (m == 0 ? 0 : kStages * kTileBytes) + buf * kTileBytes;
        *reinterpret_cast<uint4*>(tile + TileOffset<D>(r, 2 * cc)) = lo;
        *reinterpret_cast<uint4*>(tile + TileOffset<D>(r, 2 * cc + 1)) = hi;
      }
    }
  };
  // Prologue: Q with tile 0, then tiles 1 .. kStages - 2, one cp.async group each (empty
  // groups past the last tile keep the group count uniform).
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < num_kv_tiles) load_kv(t_begin + st, st);
    CpAsyncCommit();
  }

  // This thread's rows: per m-tile mt, warp rows g and g + 8 (packed rows past `rows` take
  // the last valid row's position for the mask and are never stored).
  const int g4 = lane / 4, t4 = lane % 4;
  const int warp_row0 = warp * 16 * kMT;
  int row_pos[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = min(warp_row0 + mt * 16 + g4 + 8 * i, rows - 1);
      row_pos[mt][i] = prefix + (row0 + r) / group;
    }
  const float score_scale = a.softcap > 0.0f ? a.logit_scale / a.softcap : a.logit_scale * kLog2e;
  const float cap_log2 = a.softcap * kLog2e;

  float o_acc[kMT][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      o_acc[mt][n][0] = o_acc[mt][n][1] = o_acc[mt][n][2] = o_acc[mt][n][3] = 0.0f;
  float m_run[kMT][2], l_run[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
    m_run[mt][0] = m_run[mt][1] = -INFINITY, l_run[mt][0] = l_run[mt][1] = 0.0f;

  // ldmatrix lane roles: lane supplies a row address of matrix lane / 8.
  const int lm = lane / 8, lr = lane % 8;

  for (int it = 0; it < num_kv_tiles; ++it) {
    // Tile it is group it; after this commit kStages + it groups exist, so waiting until at
    // most kStages - 1 are pending completes groups 0..it. The tile loaded here goes to the
    // stage computed in iteration it - 1 (free: the barrier that ended that iteration).
    const int kt = t_begin + it, buf = it % kStages;
    if (it + kStages - 1 < num_kv_tiles) load_kv(kt + kStages - 1, (it + kStages - 1) % kStages);
    CpAsyncCommit();
    CpAsyncWait<kStages - 1>();
    if constexpr (kFp8) widen_kv(buf);
    __syncthreads();
    const uint32_t k_tile = sK + uint32_t(buf * kTileBytes), v_tile = sV + uint32_t(buf * kTileBytes);

    // S = Q K^T: [kMT * 16 rows][kBlockN keys] per warp. Q fragments come from shared memory
    // per 32-wide slice of D (registers go to the accumulators); a K fragment feeds kMT tiles.
    float sc[kMT][kBlockN / 8][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kBlockN / 8; ++nt)
        sc[mt][nt][0] = sc[mt][nt][1] = sc[mt][nt][2] = sc[mt][nt][3] = 0.0f;
#pragma unroll
    for (int kp = 0; kp < D / 32; ++kp) {
      uint32_t qf[kMT][2][4];  // matrices: (rows 0-7 | 8-15) x (chunk 2ks | 2ks+1), ks = 2kp + h
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          Ldsm4(sQ + TileOffset<D>(warp_row0 + mt * 16 + lr + (lm & 1) * 8, 2 * (2 * kp + h) + (lm >> 1)),
                qf[mt][h]);
#pragma unroll
      for (int nt = 0; nt < kBlockN / 8; ++nt) {  // matrices: keys 8nt..+7 x chunks 4kp..4kp+3
        uint32_t kf[4];
        Ldsm4(k_tile + TileOffset<D>(nt * 8 + lr, 4 * kp + lm), kf);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          Mma(sc[mt][nt], qf[mt][0], kf[0], kf[1]);
          Mma(sc[mt][nt], qf[mt][1], kf[2], kf[3]);
        }
      }
    }

    // Scale (+ softcap) into the log2 domain; mask only tiles crossing a row's bound.
    const int key0 = kt * kBlockN;
    const bool need_mask = key0 + kBlockN - 1 > pos_first ||
                           (a.sliding_window > 0 && key0 < pos_last - a.sliding_window + 1);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kBlockN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = sc[mt][nt][e] * score_scale;
          if (a.softcap > 0.0f) x = cap_log2 * tanhf(x);
          if (need_mask) {
            const int key = key0 + nt * 8 + 2 * t4 + (e & 1), pos = row_pos[mt][e >> 1];
            const bool ok = key <= pos && (a.sliding_window <= 0 || key > pos - a.sliding_window);
            if (!ok) x = -INFINITY;
          }
          sc[mt][nt][e] = x;
        }

    // Online softmax over the tile, rows (mt, i); a row is spread over the 4 lanes of a quad.
    // O is rescaled only when some row of the warp raised its max (corr != 1): after the first
    // tiles the running max rarely moves, and the rescale is D/4 multiplies per row.
    float corr_of[kMT][2];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float mx = m_run[mt][i];
#pragma unroll
        for (int nt = 0; nt < kBlockN / 8; ++nt)
          mx = fmaxf(mx, fmaxf(sc[mt][nt][2 * i], sc[mt][nt][2 * i + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float base = mx == -INFINITY ? 0.0f : mx;  // a row with no key yet stays at 0
        const float corr = Exp2(m_run[mt][i] - base);
        m_run[mt][i] = mx;
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kBlockN / 8; ++nt) {
          sc[mt][nt][2 * i] = Exp2(sc[mt][nt][2 * i] - base);
          sc[mt][nt][2 * i + 1] = Exp2(sc[mt][nt][2 * i + 1] - base);
          sum += sc[mt][nt][2 * i] + sc[mt][nt][2 * i + 1];
        }
        l_run[mt][i] = l_run[mt][i] * corr + sum;  // per-lane partial; quad-reduced at the end
        corr_of[mt][i] = corr;
      }
    bool rescale = false;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) rescale |= corr_of[mt][0] != 1.0f || corr_of[mt][1] != 1.0f;
    if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
          o_acc[mt][n][0] *= corr_of[mt][0], o_acc[mt][n][1] *= corr_of[mt][0];
          o_acc[mt][n][2] *= corr_of[mt][1], o_acc[mt][n][3] *= corr_of[mt][1];
        }
    }

    // O += P V: k-step j covers keys 16j..16j+15; a V fragment feeds 2 n-tiles x kMT tiles.
#pragma unroll
    for (int j = 0; j < kBlockN / 16; ++j) {
      uint32_t pf[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        pf[mt][0] = PackBf16(sc[mt][2 * j][0], sc[mt][2 * j][1]);
        pf[mt][1] = PackBf16(sc[mt][2 * j][2], sc[mt][2 * j][3]);
        pf[mt][2] = PackBf16(sc[mt][2 * j + 1][0], sc[mt][2 * j + 1][1]);
        pf[mt][3] = PackBf16(sc[mt][2 * j + 1][2], sc[mt][2 * j + 1][3]);
      }
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {  // matrices: (keys +0-7 | +8-15) x (chunk 2np | 2np+1)
        uint32_t vf[4];
        Ldsm4T(v_tile + TileOffset<D>(16 * j + (lm & 1) * 8 + lr, 2 * np + (lm >> 1)), vf);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          Mma(o_acc[mt][2 * np], pf[mt], vf[0], vf[1]);
          Mma(o_acc[mt][2 * np + 1], pf[mt], vf[2], vf[3]);
        }
      }
    }
    __syncthreads();  // the next iteration's loads overwrite this buffer
  }
  CpAsyncWait<0>();

  // Epilogue: rows (mt, i) of this lane; columns n * 8 + 2 * t4 (+1).
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float l = l_run[mt][i];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int r = warp_row0 + mt * 16 + g4 + 8 * i;
      if (r >= rows) continue;
      const int pr = row0 + r, tok = pr / group;
      const int h = kvh * group + pr % group;
      if (a.num_splits == 1) {
        const float inv = l > 0.0f ? a.v_scale / l : 0.0f;
        bf16* dst = a.out + int64_t(q0 + tok) * a.out_stride + int64_t(h) * D + 2 * t4;
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
          *reinterpret_cast<__nv_bfloat162*>(dst + n * 8) =
              __floats2bfloat162_rn(o_acc[mt][n][2 * i] * inv, o_acc[mt][n][2 * i + 1] * inv);
      } else {
        const int64_t base = (int64_t(q0 + tok) * a.heads + h) * a.num_splits + split;
        float* dst = a.partial_acc + base * D + 2 * t4;
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
          *reinterpret_cast<float2*>(dst + n * 8) =
              make_float2(o_acc[mt][n][2 * i], o_acc[mt][n][2 * i + 1]);
        if (t4 == 0) a.partial_ml[2 * base] = m_run[mt][i], a.partial_ml[2 * base + 1] = l;
      }
    }
}

// Merges the splits of one (row, head) of a handled sequence; threads over head_dim.
__global__ void PrefillCombineKernel(const PrefillAttentionArgs a) {
  const int t = blockIdx.x, h = blockIdx.y, D = a.head_dim;
  if (a.batch.q_len[a.batch.token_seq[t]] < a.min_q_len) return;  // a decode row
  const int64_t base = (int64_t(t) * a.heads + h) * a.num_splits;
  float mx = -INFINITY;
  for (int i = 0; i < a.num_splits; ++i) mx = fmaxf(mx, a.partial_ml[2 * (base + i)]);
  const float m_base = mx == -INFINITY ? 0.0f : mx;
  for (int e = threadIdx.x; e < D; e += blockDim.x) {
    float sum = 0.0f, val = 0.0f;
    for (int i = 0; i < a.num_splits; ++i) {
      const float c = Exp2(a.partial_ml[2 * (base + i)] - m_base);  // empty split: m = -inf -> 0
      sum += a.partial_ml[2 * (base + i) + 1] * c;
      val += a.partial_acc[(base + i) * D + e] * c;
    }
    a.out[int64_t(t) * a.out_stride + int64_t(h) * D + e] =
        __float2bfloat16_rn(sum > 0.0f ? val / sum * a.v_scale : 0.0f);
  }
}

template <int D, int kMT, bool kFp8>
void LaunchFor(const PrefillAttentionArgs& a, cudaStream_t stream) {
  constexpr int kSmem = SmemBytes<D, kMT, kFp8>();
  // Opt in to > 48 KiB of dynamic shared memory once per specialisation (thread-safe static).
  static const cudaError_t attr = cudaFuncSetAttribute(
      PrefillKernel<D, kMT, kFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  (void)attr;  // a failure surfaces as the launch error the caller checks
  const dim3 grid(unsigned(a.num_tiles), unsigned(a.kv_heads), unsigned(a.num_splits));
  PrefillKernel<D, kMT, kFp8><<<grid, kWarps * 32, kSmem, stream>>>(a);
}

template <int D, int kMT, bool kFp8>
int BlocksPerSmFor() {
  static const int n = [] {  // cached per specialisation (thread-safe static)
    constexpr int kSmem = SmemBytes<D, kMT, kFp8>();
    cudaFuncSetAttribute(PrefillKernel<D, kMT, kFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    int blocks = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, PrefillKernel<D, kMT, kFp8>,
                                                      kWarps * 32, size_t(kSmem)) != cudaSuccess)
      blocks = 1;
    return blocks > 0 ? blocks : 1;
  }();
  return n;
}

// Blocks of the kernel resident per multiprocessor (occupancy). fp8 caches: 64-row tiles.
int BlocksPerSm(int head_dim, int block_m, bool fp8) {
  if (fp8) return head_dim == 64 ? BlocksPerSmFor<64, 1, true>() : BlocksPerSmFor<128, 1, true>();
  if (head_dim == 64) return block_m == 128 ? BlocksPerSmFor<64, 2, false>() : BlocksPerSmFor<64, 1, false>();
  return block_m == 128 ? BlocksPerSmFor<128, 2, false>() : BlocksPerSmFor<128, 1, false>();
}

}  // namespace

bool PrefillAttentionSupportsHeadDim(int d) { return d == 64 || d == 128; }

// The wgmma kernel needs sm_90a (compute capability 9.x); PEREGRINE_PREFILL_WGMMA=0 / 1 turns
// it off / on (A/B against the mma.sync kernel), unset: kWgmmaDefault. Cached per process (the
// current device at first use).
constexpr bool kWgmmaDefault = true;  // passed the GPU harness 2026-12-01 (docs/PERF.md)
static bool WgmmaEnabled() {
  static const bool on = [] {
    if (!EnvFlag("PEREGRINE_PREFILL_WGMMA", kWgmmaDefault)) return false;
    int dev = 0, major = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    return major == 9;
  }();
  return on;
}

void PlanPrefillAttention(PrefillAttentionArgs& a, const int32_t* q_len, const int32_t* kv_len,
                          int num_seqs, int force_splits) {
  if (a.kv_fp8) a.block_m = 64;  // the only fp8 specialisation
  // The one place choosing the kernel (LaunchPrefillAttention follows a.wgmma). The wgmma
  // kernel takes every shape it supports, whatever block_m was asked for: it was faster at
  // every q_len measured, 1 to 32K (bench_prefill, docs/PERF.md "CUDA prefill attention").
  a.wgmma = a.allow_wgmma && !a.kv_fp8 && a.head_dim == prefill::kWgmmaHeadDim && WgmmaEnabled();
  if (a.wgmma) a.block_m = prefill::kWgmmaBlockM;
  const int block_n = a.wgmma ? prefill::kWgmmaBlockN : kBlockN;
  const int group = a.heads / a.kv_heads;
  int64_t tiles = 0, max_kv = 1;
  for (int s = 0; s < num_seqs; ++s) {
    if (q_len[s] < a.min_q_len || q_len[s] <= 0) continue;
    tiles += (int64_t(q_len[s]) * group + a.block_m - 1) / a.block_m;
    max_kv = std::max(max_kv, int64_t(kv_len[s]));
  }
  a.num_tiles = int(std::min<int64_t>(tiles, INT32_MAX));
  int64_t splits = 1;
  if (force_splits > 0) {
    splits = force_splits;
  } else if (tiles > 0) {
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const int64_t blocks = tiles * a.kv_heads;
    const int64_t slots =
        int64_t(std::max(sms, 1)) * (a.wgmma ? 1 : BlocksPerSm(a.head_dim, a.block_m, a.kv_fp8));
    if (blocks < 8 * slots) {
      double best = 1e30;
      const int64_t max_splits = std::min<int64_t>(std::max<int64_t>(max_kv / 256, 1), 32);
      for (int64_t sp = 1; sp <= max_splits; ++sp) {
        // Time ~ waves * keys per split; each split costs a little (partials, combine).
        const double cost =
            double((blocks * sp + slots - 1) / slots) / double(sp) * (1.0 + 0.01 * double(sp));
        if (cost < best) best = cost, splits = sp;
      }
    }
  }
  int64_t chunk = (max_kv + splits - 1) / splits;
  chunk = (chunk + block_n - 1) / block_n * block_n;  // whole key tiles
  a.chunk = int(chunk);
  a.num_splits = int((max_kv + chunk - 1) / chunk);
}

void LaunchPrefillAttention(const PrefillAttentionArgs& a, cudaStream_t stream) {
  if (a.num_tiles == 0 || a.batch.num_tokens == 0) return;
  const bool wide = a.block_m == 128;
  if (a.wgmma) {
    prefill::LaunchPrefillWgmma(a, stream);
  } else {
    switch (a.head_dim * (a.kv_fp8 ? -1 : 1)) {
      case 64: wide ? LaunchFor<64, 2, false>(a, stream) : LaunchFor<64, 1, false>(a, stream); break;
      case 128: wide ? LaunchFor<128, 2, false>(a, stream) : LaunchFor<128, 1, false>(a, stream); break;
      case -64: LaunchFor<64, 1, true>(a, stream); break;
      case -128: LaunchFor<128, 1, true>(a, stream); break;
      default: return;  // the launcher checked PrefillAttentionSupportsHeadDim
    }
  }
  if (a.num_splits > 1)
    PrefillCombineKernel<<<dim3(unsigned(a.batch.num_tokens), unsigned(a.heads)), 128, 0, stream>>>(a);
}

}  // namespace pg::cuda
