// sm_90a prefill attention with warpgroup MMAs (wgmma), FlashAttention-3's math on the
// decomposition of prefill_attention.h (GQA heads packed into rows, paged bf16 K/V, causal /
// sliding-window masks, split-K partials in the same format as the mma.sync kernel).
//
// Block: 256 threads = 2 warpgroups; warpgroup wg owns packed rows [64 wg, 64 wg + 64) of the
// block's 128 (kWgmmaBlockM). All 8 warps copy (cp.async, 3 K/V stages in flight); both
// warpgroups compute on every 128-key tile:
//   S [64 x 128] = Q K^T : 8 x wgmma m64n128k16, Q and K both from shared memory (K-major);
//   online softmax on S in registers (log2 domain, ex2), O rescaled when a row's max moved;
//   O [64 x 128] += P V  : 8 x wgmma m64n128k16, P from registers (bf16, S's accumulator
//   layout is the A fragment layout), V from shared memory read MN-major (keys along K).
// Shared memory (1024-aligned, 128-byte swizzle, wgmma.cuh's layout: 64-column blocks):
//   sQ [2][128 rows][64], sK / sV [3 stages][2][128 keys][64] bf16 = 32 + 192 KiB.
// Two schedules (main loop): lockstep (a block barrier per key tile, cp.async groups) and
// ping-pong (mbarriers per stage, the warpgroups take turns issuing their MMAs).
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "core/env.h"
#include "kernels/cuda/attention/prefill_common.cuh"
#include "kernels/cuda/attention/prefill_wgmma.h"
#include "kernels/cuda/attention/wgmma.cuh"

namespace pg::cuda::prefill {
namespace {

constexpr int D = kWgmmaHeadDim, BM = kWgmmaBlockM, BN = kWgmmaBlockN;
constexpr int kThreads = 256;
constexpr int kStages = 3;
constexpr int kQBytes = BM * D * 2;
constexpr int kTileBytes = BN * D * 2;  // one K or V tile
// + 1024: base alignment; + 64: the ping-pong schedule's mbarriers (full / empty per stage)
constexpr int kSmem = kQBytes + 2 * kStages * kTileBytes + 1024 + 64;
constexpr float kLog2e = 1.4426950408889634f;
constexpr bool kPingPongDefault = true;  // 493-531 vs 430-487 TFLOP/s lockstep (docs/PERF.md)

// Byte offset of 16-byte chunk c (0 .. D/8) of row r in a swizzled [rows][D] tile (wgmma.cuh).
__device__ __forceinline__ uint32_t SwOffset(int rows, int r, int c) {
  return uint32_t((c >> 3) * rows * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// kPvN: N of each P V wgmma (128: one per k-step; 64: two, one per 64-column block of V).
// kPingPong: the warpgroups' schedule (lockstep or ping-pong, see the main loop).
template <int kPvN, bool kPingPong>
__global__ void __launch_bounds__(kThreads, 1) PrefillWgmmaKernel(const PrefillAttentionArgs a) {
  extern __shared__ unsigned char smem_raw[];
  const uint32_t sQ = (SmemAddr(smem_raw) + 1023u) & ~1023u;
  const uint32_t sK = sQ + kQBytes;                      // [kStages] tiles
  const uint32_t sV = sK + kStages * kTileBytes;         // [kStages] tiles

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wg = warp / 4, wwarp = warp % 4;  // warpgroup, warp within it
  const int kvh = blockIdx.y, split = blockIdx.z;
  const DeviceBatchView& b = a.batch;
  const int group = a.heads / a.kv_heads;
  const BlockWork w = FindBlockWork(a, BM);
  if (w.tile < 0) return;
  const int t_begin = w.key_lo / BN;
  const int num_kv_tiles = w.key_hi > w.key_lo ? (w.key_hi + BN - 1) / BN - t_begin : 0;
  const int32_t* pages = b.page_table + b.page_start[w.seq];
  const int64_t slot_stride = int64_t(a.kv_heads) * D;  // elements between token slots

  // Q: thread copies chunk tid % 16 of rows tid / 16 + 16 i (rows past w.rows: zeros).
  {
    const int c = tid % 16;
    for (int r = tid / 16; r < BM; r += kThreads / 16) {
      const bool valid = r < w.rows;
      const int pr = w.row0 + (valid ? r : 0);
      const int tok = pr / group, g = pr % group;
      const bf16* src = a.q + int64_t(w.q0 + tok) * a.q_stride + int64_t(kvh * group + g) * D + c * 8;
      CpAsync16(sQ + SwOffset(BM, r, c), src, valid);
    }
  }
  // K/V tile kt -> stage st: warp copies tile rows [16 warp, +16); lane l < 16 finds the cache
  // slot of row 16 warp + l once (lanes 16-31 duplicate), 16 lanes copy a row (16 B each).
  const int ps = b.page_size;
  const int ps_shift = (ps & (ps - 1)) == 0 ? __ffs(ps) - 1 : -1;  // power-of-two pages
  auto load_kv = [&](int kt, int st) {
    const int tok = kt * BN + warp * 16 + (lane & 15);
    int64_t my_off = -1;  // past key_hi: masked for every row; zero-filled, not read
    if (tok < w.key_hi) {
      const int pi = ps_shift >= 0 ? tok >> ps_shift : tok / ps;
      my_off = (int64_t(pages[pi]) * ps + (tok - pi * ps)) * slot_stride + int64_t(kvh) * D;
    }
    const int cc = lane % 16;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int rr = 2 * i + lane / 16;
      const int64_t off = __shfl_sync(0xffffffffu, my_off, rr);
      const bool valid = off >= 0;
      const int64_t src = valid ? off + cc * 8 : 0;
      const uint32_t o = uint32_t(st * kTileBytes) + SwOffset(BN, warp * 16 + rr, cc);
      CpAsync16(sK + o, static_cast<const bf16*>(a.k_cache) + src, valid);
      CpAsync16(sV + o, static_cast<const bf16*>(a.v_cache) + src, valid);
    }
  };
  constexpr int kAhead = kStages - 1;  // tiles in flight ahead of the one computed

  // This thread's rows (block rows 64 wg + 16 wwarp + g4 + 8 i); rows past w.rows take the
  // last valid row's position for the mask and are never stored.
  const int g4 = lane / 4, t4 = lane % 4;
  const int my_row0 = wg * 64 + wwarp * 16 + g4;
  int row_pos[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) row_pos[i] = w.prefix + (w.row0 + min(my_row0 + 8 * i, w.rows - 1)) / group;
  const float score_scale = a.softcap > 0.0f ? a.logit_scale / a.softcap : a.logit_scale * kLog2e;
  const float cap_log2 = a.softcap * kLog2e;
  const float exp_scale = a.softcap > 0.0f ? 1.0f : score_scale;  // raw score -> log2 domain

  float o[64];  // O accumulators: n-tile n (cols 8n + 2 t4, +1) of rows g4 (o[4n], o[4n+1]), g4 + 8
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  const uint32_t q_rows = sQ + uint32_t(wg * 64 * 128);  // this warpgroup's 64 rows, block 0
  float sc[64];                // scores of the current tile
  uint32_t pf[BN / 16][4];     // P (bf16) of the tile whose P V is next: k-step j = keys 16j..+15

  // S = Q K^T of the tile in stage st (issued, not waited): 8 k-steps of 16 over D (4 per
  // 64-column block, +32 B each).
  auto issue_s = [&](int st) {
    const uint32_t k_tile = sK + uint32_t(st * kTileBytes);
    wgmma::FenceRegs(sc);  // earlier reads of sc stay before the wgmma fence
    wgmma::WgFence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const uint32_t col = uint32_t((ks & 3) * 32);  // k-step within its 64-column block
      const uint64_t da = wgmma::SmemDesc(q_rows + uint32_t((ks >> 2) * BM * 128) + col, 16, 1024);
      const uint64_t db = wgmma::SmemDesc(k_tile + uint32_t((ks >> 2) * BN * 128) + col, 16, 1024);
      wgmma::WgmmaSS128(sc, da, db, ks > 0);  // k-step 0 overwrites sc
    }
  };
  // O += P V of the tile in stage st, P from pf (issued, not waited).
  auto issue_pv = [&](int st) {
    const uint32_t v_tile = sV + uint32_t(st * kTileBytes);
    wgmma::FenceRegs(o);
    wgmma::FenceRegs(pf);
    wgmma::WgFence();
#pragma unroll
    for (int j = 0; j < BN / 16; ++j) {
      const uint32_t v_rows = v_tile + uint32_t(j * 16 * 128);  // keys 16 j.., 2048 B per step
      if constexpr (kPvN == 128) {
        wgmma::WgmmaRS128(o, pf[j], wgmma::SmemDesc(v_rows, BN * 128, 1024));
      } else {
        wgmma::WgmmaRS64(o, pf[j], wgmma::SmemDesc(v_rows, BN * 128, 1024));
        wgmma::WgmmaRS64(o + 32, pf[j], wgmma::SmemDesc(v_rows + BN * 128, BN * 128, 1024));
      }
    }
  };
  // After S of key tile kt completed: mask, online softmax, O rescale (no P V in flight), P -> pf.
  auto softmax = [&](int kt) {
    wgmma::FenceRegs(sc);
    // Softcap (into the log2 domain) if any; mask only tiles crossing a row's bound. Without
    // softcap the scores stay raw and the log2-domain scale is folded into the exponent's FMA.
    const int key0 = kt * BN;
    const bool need_mask = key0 + BN - 1 > w.pos_first ||
                           (a.sliding_window > 0 && key0 < w.pos_last - a.sliding_window + 1);
    if (a.softcap > 0.0f || need_mask) {
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = sc[4 * nt + e];
          if (a.softcap > 0.0f) x = cap_log2 * tanhf(x * score_scale);
          if (need_mask) {
            const int key = key0 + nt * 8 + 2 * t4 + (e & 1), pos = row_pos[e >> 1];
            const bool ok = key <= pos && (a.sliding_window <= 0 || key > pos - a.sliding_window);
            if (!ok) x = -INFINITY;
          }
          sc[4 * nt + e] = x;
        }
    }
    // A row is spread over the 4 lanes of a quad. m_run is in the log2 domain.
    float corr[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) mx = fmaxf(mx, fmaxf(sc[4 * nt + 2 * i], sc[4 * nt + 2 * i + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      mx = fmaxf(m_run[i], mx * exp_scale);  // exp_scale > 0 keeps the order; -inf stays -inf
      const float base = mx == -INFINITY ? 0.0f : mx;  // a row with no key yet stays at 0
      corr[i] = Exp2(m_run[i] - base);
      m_run[i] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
        sc[4 * nt + 2 * i] = Exp2(fmaf(sc[4 * nt + 2 * i], exp_scale, -base));
        sc[4 * nt + 2 * i + 1] = Exp2(fmaf(sc[4 * nt + 2 * i + 1], exp_scale, -base));
        sum += sc[4 * nt + 2 * i] + sc[4 * nt + 2 * i + 1];
      }
      l_run[i] = l_run[i] * corr[i] + sum;  // per-lane partial; quad-reduced at the end
    }
    wgmma::FenceRegs(o);
    if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[4 * n] *= corr[0], o[4 * n + 1] *= corr[0];
        o[4 * n + 2] *= corr[1], o[4 * n + 3] *= corr[1];
      }
    }
#pragma unroll
    for (int j = 0; j < BN / 16; ++j) {
      pf[j][0] = PackBf16(sc[8 * j], sc[8 * j + 1]);
      pf[j][1] = PackBf16(sc[8 * j + 2], sc[8 * j + 3]);
      pf[j][2] = PackBf16(sc[8 * j + 4], sc[8 * j + 5]);
      pf[j][3] = PackBf16(sc[8 * j + 6], sc[8 * j + 7]);
    }
  };
  auto wait_all = [&] {
    wgmma::WgCommit();
    wgmma::WgWait<0>();
    wgmma::FenceRegs(sc);
    wgmma::FenceRegs(o);
    wgmma::FenceRegs(pf);
  };

  if constexpr (!kPingPong) {
    // Lockstep: both warpgroups S, softmax, P V on tile it between block barriers.
    // Prologue: group 0 = Q + tile 0, group 1 = tile 1; empty groups keep the count uniform.
#pragma unroll
    for (int st = 0; st < kAhead; ++st) {
      if (st < num_kv_tiles) load_kv(t_begin + st, st);
      CpAsyncCommit();
    }
    for (int it = 0; it < num_kv_tiles; ++it) {
      const int st = it % kStages;
      CpAsyncWait<kAhead - 1>();  // groups 0 .. it complete: Q and tile it
      wgmma::FenceProxyAsync();   // this thread's copies -> visible to the async proxy
      __syncthreads();            // everyone's copies landed; stage (it + 2) % 3 free
      if (it + kAhead < num_kv_tiles) load_kv(t_begin + it + kAhead, (it + kAhead) % kStages);
      CpAsyncCommit();
      issue_s(st);
      wait_all();
      softmax(t_begin + it);
      issue_pv(st);
      wait_all();
    }
    CpAsyncWait<0>();
  } else if (num_kv_tiles > 0) {
    // Ping-pong (FlashAttention-3's inter-warpgroup overlap): a warpgroup's "unit" is
    // P V(it - 1) + S(it), issued when it holds the turn (named barrier 1 + wg, passed to the
    // other after the issue), so one warpgroup's softmax runs under the other's MMAs.
    // K/V stages: full[s] completes when all 256 threads' copies of the stage landed
    // (cp.async arrive), empty[s] when all threads' P V on it completed; a thread loads tile
    // t into stage t % 3 after empty's phase t / 3 - 1. No block barrier in the loop.
    const uint32_t full = sV + uint32_t(kStages * kTileBytes), empty = full + 8 * kStages;
    if (tid == 0)
      for (int st = 0; st < kStages; ++st) wgmma::MbarInit(full + 8 * st, kThreads), wgmma::MbarInit(empty + 8 * st, kThreads);
    __syncthreads();
    auto load_tile = [&](int t) {  // t: tile index relative to t_begin
      const int st = t % kStages;
      if (t >= kStages) wgmma::MbarWait(empty + 8 * st, uint32_t((t / kStages - 1) & 1));
      load_kv(t_begin + t, st);
      wgmma::CpAsyncMbarArrive(full + 8 * st);  // Q's copies (tile 0's arrival) included
    };
    auto wait_full = [&](int t) {
      wgmma::MbarWait(full + 8 * (t % kStages), uint32_t((t / kStages) & 1));
      wgmma::FenceProxyAsync();  // the landed copies -> visible to this thread's wgmma reads
    };
    const int my_turn = 1 + wg, their_turn = 2 - wg;
    for (int t = 0; t < kAhead && t < num_kv_tiles; ++t) load_tile(t);
    if (wg == 1) wgmma::NamedBarArrive(1, kThreads);  // warpgroup 0 takes the first turn

    wait_full(0);
    wgmma::NamedBarSync(my_turn, kThreads);
    issue_s(0);
    wgmma::NamedBarArrive(their_turn, kThreads);
    wait_all();
    softmax(t_begin);
    if (kAhead < num_kv_tiles) load_tile(kAhead);
    for (int it = 1; it < num_kv_tiles; ++it) {
      wait_full(it);
      wgmma::NamedBarSync(my_turn, kThreads);
      issue_pv((it - 1) % kStages);
      issue_s(it % kStages);
      wgmma::NamedBarArrive(their_turn, kThreads);
      wait_all();
      wgmma::MbarArrive(empty + 8 * ((it - 1) % kStages));
      softmax(t_begin + it);
      if (it + kAhead < num_kv_tiles) load_tile(it + kAhead);
    }
    wgmma::NamedBarSync(my_turn, kThreads);
    issue_pv((num_kv_tiles - 1) % kStages);
    wgmma::NamedBarArrive(their_turn, kThreads);
    wait_all();
    if (wg == 0) wgmma::NamedBarSync(1, kThreads);  // warpgroup 1's last arrival on turn 1
  } else {
    asm volatile("cp.async.wait_all;\n" ::: "memory");  // no key tile: Q's copies still land
  }


  // Epilogue: rows my_row0 + 8 i; columns 8 n + 2 t4 (+1).
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float l = l_run[i];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int r = my_row0 + 8 * i;
    if (r >= w.rows) continue;
    const int pr = w.row0 + r, tok = pr / group;
    const int h = kvh * group + pr % group;
    if (a.num_splits == 1) {
      const float inv = l > 0.0f ? a.v_scale / l : 0.0f;
      bf16* dst = a.out + int64_t(w.q0 + tok) * a.out_stride + int64_t(h) * D + 2 * t4;
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<__nv_bfloat162*>(dst + n * 8) =
            __floats2bfloat162_rn(o[4 * n + 2 * i] * inv, o[4 * n + 2 * i + 1] * inv);
    } else {
      const int64_t base = (int64_t(w.q0 + tok) * a.heads + h) * a.num_splits + split;
      float* dst = a.partial_acc + base * D + 2 * t4;
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<float2*>(dst + n * 8) = make_float2(o[4 * n + 2 * i], o[4 * n + 2 * i + 1]);
      if (t4 == 0) a.partial_ml[2 * base] = m_run[i], a.partial_ml[2 * base + 1] = l;
    }
  }
}

template <int kPvN, bool kPingPong>
void LaunchFor(const PrefillAttentionArgs& a, cudaStream_t stream) {
  static const cudaError_t attr = cudaFuncSetAttribute(
      PrefillWgmmaKernel<kPvN, kPingPong>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  (void)attr;  // a failure surfaces as the launch error the caller checks
  const dim3 grid(unsigned(a.num_tiles), unsigned(a.kv_heads), unsigned(a.num_splits));
  PrefillWgmmaKernel<kPvN, kPingPong><<<grid, kThreads, kSmem, stream>>>(a);
}

}  // namespace

void LaunchPrefillWgmma(const PrefillAttentionArgs& a, cudaStream_t stream) {
  // Diagnostic A/B switches: PEREGRINE_WGMMA_PV64=1: P V as two n64 wgmmas per k-step;
  // PEREGRINE_WGMMA_PINGPONG=0/1: lockstep / ping-pong warpgroups.
  static const bool pv64 = EnvFlag("PEREGRINE_WGMMA_PV64", false);
  static const bool pingpong = EnvFlag("PEREGRINE_WGMMA_PINGPONG", kPingPongDefault);
  if (pv64)
    pingpong ? LaunchFor<64, true>(a, stream) : LaunchFor<64, false>(a, stream);
  else
    pingpong ? LaunchFor<128, true>(a, stream) : LaunchFor<128, false>(a, stream);
}

}  // namespace pg::cuda::prefill
