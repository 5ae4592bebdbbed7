// Ring tensor-core fp8 GEMV: out[r, j] = (accumulate ? out[r, j] : 0) + sum_i x[r, i] *
// w[j, i] * scale(j, i) (+ bias[j]) for up to 8 activation rows r a pass (Fp8GemvArgs), with
// the fused options of FusedMatmul: RMSNorm prologue (the consumers stage the normalised
// rows in shared memory after PdlWait, kStageX, gemv_device.cuh StageRowsOf; without the norm
// kStageX stages x as it is, Fp8GemvVariant::ring_stage_x) and SwiGLU
// epilogue (kSwiGlu: a group is 8 gate rows j0.. in slot rows 0-7 and their up rows m + j0..
// in slot rows 8-15, so a lane holds gate and up of the same output, whose sums it rounds to
// bf16 before silu(gate) * up, as the composition Matmul -> SwiGlu rounds).
//
// One block per SM (grid = min(SMs, m)); block b owns the contiguous output rows
// [m b / grid, m (b + 1) / grid) (any row count: the slices balance bytes, not 16-row
// groups) and walks them in groups of 16 weight rows (the last one shorter). A producer warp
// (the last) bulk-copies each group, in `chunk`-column pieces of k, into ring slots
// (cp.async.bulk, completion counted in bytes on the slot's full mbarrier, L2 evict-first),
// starting before PdlWait (weights only: pdl.cuh's contract), so the ring (up to ~200 KB an
// SM) is in flight while the previous kernel drains. The copies cost about the same per
// copy up to several KB (request 1: 1 KB pieces 1.7x slower than 4 KB), so they are as large
// as fit: with contiguous rows and chunk == k one copy a group ("whole"), else one a row
// piece. kCw (8 or 16) consumer warps wait for each slot, take its 64-column steps t = warp,
// warp + kCw, ... (16 rows x 64 columns: 4 MMAs m16n8k16, the weights widened e4m3 -> bf16 by
// bit operations, fp8_mma.cuh), and give it back on its empty mbarrier (one arrive per
// consumer warp). Activations: lane (g, q) of the MMA reads row g's 32 bytes of the step
// (zero for g >= rows) from global (L1 / L2 hits) or from the staged rows.
//
// Shared memory: [full mbarriers kMaxStages][empty kMaxStages][reduction 2 x kCw warps x 32
// lanes float4][ring: stages x 16 rows x row_stride bytes][kStageX: rows x (k / 8 + 1) 16-byte
// chunks of (normalised) x; the pad chunk makes the fragment reads conflict-free]. Row pieces
// are padded to row_stride = round_up(chunk, 128) + 64 bytes, so the 8 lanes of a quarter-warp
// (rows g, g + 1, columns 16q) hit 8 different 16-byte bank groups in their 16-byte loads;
// whole groups are not (row_stride = k: a 2-way conflict when k % 128 == 0, measured cheaper
// than the copies it saves).
//
// Summation order (fixed by the consumer warp count, whatever the ring layout): a warp sums
// its steps (global step index = warp mod kCw, in k order: chunk is a multiple of kCw steps
// of 64 columns or all of k): without block scales each of a step's four MMAs (16 columns)
// into its own accumulator, the four added as (0 + 1) + (2 + 3) at the end (request 4: as
// fast as one chain, kept); with block scales the step's four MMAs in one chain, times the
// step's scale (fmaf; split chains measured slower there: V3 q_b 28.0 vs 23.0 us). Then one
// warp adds the warps' sums in warp order and writes acc * 2^120 * row scale (+ bias, + out)
// rounded to bf16. (Block scales: bitwise Fp8GemvMmaKernel with split kCw, interleaved.)
#include <algorithm>
#include <atomic>

#include "core/env.h"
#include "kernels/cuda/common/bulk_copy.cuh"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/gemm/fp8_ring_mma.h"
#include "kernels/cuda/gemm/gemv_device.cuh"
#include "kernels/cuda/moe/fp8_mma.cuh"
#include "kernels/cuda/moe/moe_device.cuh"

namespace pg::cuda {
namespace {

// Consumer warps: kCw = 8 (default) or 16 (Fp8GemvVariant::ring_warps); + the producer warp.
template <int kCw>
constexpr int kThreadsOf = (kCw + 1) * 32;
constexpr int kGroupRows = 16;                       // weight rows a slot (the MMA's M)
constexpr int kMaxStages = 16;
constexpr int kBarBytes = 2 * kMaxStages * 8;
// Two buffers of [warp][lane] float4 (the warps' partial sums).
__host__ __device__ constexpr int RedBytes(int consumer_warps) { return 2 * consumer_warps * 32 * 16; }
constexpr int kRowPad = 64;
constexpr int64_t kMaxStagedBytes = 120 * 1024;  // kStageX: the staged rows of a pass, at most

// kStageX: bytes of a pass's staged rows, [min(n, 8)][k / 8 + 1] 16-byte chunks.
int64_t StagedBytes(int64_t n, int64_t k) { return (n < 8 ? n : 8) * (k / 8 + 1) * 16; }
int64_t StagedBytes(const Fp8GemvArgs& a) { return StagedBytes(a.n, a.k); }

// Launch geometry, fixed per pass on the host.
struct RingMmaPlan {
  int64_t row0;     // first activation row of this pass
  int rows;         // activation rows of this pass, 1..8
  int chunk;        // columns (= bytes) of a row piece: a multiple of 64 x consumer warps, or k
  int row_stride;   // bytes between a slot's rows
  int slot_bytes;   // kGroupRows * row_stride
  int stages;       // ring slots, <= kMaxStages
  bool whole;       // chunk == k == ldw: a group's rows are one contiguous run (two with
                    // swiglu), copied with one bulk copy each (row_stride = k, no pad)
  int x_offset;     // kStageX: byte offset of the staged rows
  // > 0: the producer's first round of the ring keeps at most this many slots in flight
  // (slot s is issued once slot s - fill_inflight has landed): fewer outstanding weight reads
  // beside the previous kernel's latency-bound steps (Fp8GemvVariant::ring_fill_inflight).
  int fill_inflight;
};

// kMinBlocks: blocks an SM the registers must allow (2: ring_blocks 2, 8 warps). kBf16W: the
// weights are bf16 (a.w holds their bytes, ldw in elements, no scales: scale_mode kNone), a
// 64-column step is 128 bytes a row and lane q's 16 columns two 16-byte loads.
template <int kCw, int kMinBlocks, bool kBlock, bool kStageX, bool kSwiGlu, bool kBf16W = false>
__global__ void __launch_bounds__(kThreadsOf<kCw>, kMinBlocks)
    Fp8RingMmaKernel(Fp8GemvArgs a, RingMmaPlan p) {
  PG_BLOCK_TRACE(kTraceFp8Ring);
  constexpr int kConsumerWarps = kCw;
  constexpr int kEs = kBf16W ? 2 : 1;  // bytes a weight
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kOutRows = kSwiGlu ? kGroupRows / 2 : kGroupRows;  // output rows a group
  PdlTrigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t jb = a.m * blockIdx.x / gridDim.x, je = a.m * (blockIdx.x + 1) / gridDim.x;
  const int64_t groups = (je - jb + kOutRows - 1) / kOutRows;
  const int64_t chunks = (a.k + p.chunk - 1) / p.chunk;
  const uint32_t full0 = bulk::SmemAddr(smem), empty0 = full0 + kMaxStages * 8;
  const int ring_offset = kBarBytes + RedBytes(kCw);
  // Weight row of slot row r (< 16) in the group starting at output row j0; valid when
  // r % kOutRows < je - j0.
  auto w_row = [&](int64_t j0, int r) -> int64_t {
    return kSwiGlu ? (r < kOutRows ? j0 + r : a.m + j0 + r - kOutRows) : j0 + r;
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < p.stages; ++s) {
      bulk::MbarInit(full0 + 8 * s, 1);
      bulk::MbarInit(empty0 + 8 * s, kConsumerWarps);
    }
    bulk::FenceMbarInit();
  }
  __syncthreads();

  if (warp == kConsumerWarps) {  // ---- producer: slot s = (group gi, piece c)
    const uint64_t policy = bulk::EvictFirstPolicy();
    const uint32_t ring0 = bulk::SmemAddr(smem + ring_offset);
    // Slot s = gi * chunks + c. (One loop over s, not one over gi and c: the nested form left
    // ptxas with other register spills in several instantiations.)
    bulk::RingCursor ring_at;
    for (int64_t s = 0, gi = 0, c = 0; s < groups * chunks; ++s, ring_at.Advance(1, p.stages)) {
      const int slot = ring_at.slot;
      const int64_t j0 = jb + kOutRows * gi, k0 = c * p.chunk;
      const int nout = int(je - j0 < kOutRows ? je - j0 : kOutRows);
      const uint32_t piece = uint32_t(a.k - k0 < p.chunk ? a.k - k0 : p.chunk) * kEs;  // bytes
      if (lane == 0) {
        if (s < p.stages) bulk::PaceFirstFill(full0, int(s), p.fill_inflight, p.stages, ~0u);  // all armed
        bulk::MbarWait(empty0 + 8 * slot, ring_at.phase ^ 1);
        bulk::MbarArriveExpectTx(full0 + 8 * slot, uint32_t(kGroupRows / kOutRows * nout) * piece);
      }
      __syncwarp();
      if (p.whole) {  // lane 0: rows w_row(j0, 0) .. + nout; swiglu, lane 1: the up rows
        if (lane < kGroupRows / kOutRows)
          bulk::BulkLoad(ring0 + uint32_t(slot) * p.slot_bytes + uint32_t(lane * kOutRows) * p.row_stride,
                         a.w + w_row(j0, lane * kOutRows) * a.ldw * kEs, uint32_t(nout) * piece,
                         full0 + 8 * slot, policy);
      } else if (lane < kGroupRows && lane % kOutRows < nout)
        bulk::BulkLoad(ring0 + uint32_t(slot) * p.slot_bytes + uint32_t(lane) * p.row_stride,
                       a.w + (w_row(j0, lane) * a.ldw + k0) * kEs, piece, full0 + 8 * slot, policy);
      if (++c == chunks) c = 0, ++gi;
    }
    return;
  }

  // ---- consumers ---------------------------------------------------------------------------
  PdlWait();
  float4* red = reinterpret_cast<float4*>(smem + kBarBytes);
  const int g = lane / 4, q = lane % 4;
  const bool has_x = g < p.rows;
  // Row g's 16 columns of this lane in step 0 (+ 8 uint4 a 64-column step): the staged
  // (normalised with a.norm_weight) rows, or x in global memory.
  const uint4* xr;
  if constexpr (kStageX) {
    uint4* staged = reinterpret_cast<uint4*>(smem + p.x_offset);
    const int64_t ld = a.k / 8 + 1;
    const gemv::StageSource src{a.x + p.row0 * a.ldx, a.ldx, a.k, a.norm_weight, a.norm_type, a.norm_eps};
    gemv::StageRowsOf<kConsumerWarps>(src, p.rows, staged, ld, threadIdx.x, reinterpret_cast<float*>(red),
                                      [] { bulk::NamedBarrier<kConsumerWarps * 32>(1); });
    xr = staged + (has_x ? g : 0) * ld + 2 * q;
  } else {
    xr = reinterpret_cast<const uint4*>(a.x + (p.row0 + (has_x ? g : 0)) * a.ldx) + 2 * q;
  }
  const unsigned char* ring = smem + ring_offset;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  // kPrefetchX (bf16 weights, x from global): the first kPre steps of this warp in the NEXT
  // piece of k are loaded while the current one is used (x does not depend on the group: after
  // the last piece comes piece 0 of the next group), so an L2 round trip per piece stays off
  // the critical path when x is too large for L1 (8 rows x 14336: 229 KB). Same steps, same
  // order. (The fp8 instantiations keep the loads at their use: their registers are at the
  // launch bound's cap and would spill.)
  constexpr bool kPrefetchX = kBf16W && !kStageX;
  constexpr int kPre = 4;
  uint4 xn[kPre][2];
  auto load_x = [&](int64_t c) {
    const int64_t k0 = c * p.chunk;
    const int steps = int((a.k - k0 < p.chunk ? a.k - k0 : p.chunk) / 64);
    const uint4* xs = xr + k0 / 8;
#pragma unroll
    for (int i = 0; i < kPre; ++i) {
      const int t = warp + i * kConsumerWarps;
      xn[i][0] = xn[i][1] = zero;
      if (has_x && t < steps) xn[i][0] = __ldg(xs + 8 * t), xn[i][1] = __ldg(xs + 8 * t + 1);
    }
  };
  if constexpr (kPrefetchX) load_x(0);
  bulk::RingCursor ring_at;  // slot s = gi * chunks + c, as the producer's
  for (int64_t gi = 0; gi < groups; ++gi) {
    const int64_t j0 = jb + kOutRows * gi;
    // acc[i][e]: MMA i of each step (its own chain: fp8_mma.cuh Mma16Split; block scales:
    // acc[0] only, each step's chained 4-MMA sum times its scale); e: slot rows g (0, 1) and
    // g + 8 (2, 3).
    float acc[4][4] = {};
    // The group's epilogue warp reads its operands now, not after the walk (their latency
    // would add to every group's critical path and the kernel's tail): slot row of e = g +
    // 8 (e / 2) -> weight row jw[e]; mul = 2^120 (the widening's exponent shift) x the row's
    // scale (2^120 exact: sum * mul rounds as (sum * 2^120) * scale), its bias and, with
    // accumulate, the output's old value.
    const bool epilogue = warp == int(gi % kConsumerWarps);
    float mul[4] = {}, bias[4] = {}, prev[4] = {};
    if (epilogue) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t j = j0 + g + (kSwiGlu ? 0 : 8 * (e / 2));  // output row
        const int64_t jw = w_row(j0, g + 8 * (e / 2));
        const int r = 2 * q + e % 2;
        if (j >= je) continue;
        if constexpr (kBf16W) mul[e] = 1.0f;
        else mul[e] = 0x1p120f * moe::ScaleOfRow(a.scale, a.scale_mode, a.scale_ld, jw).row;
        if (a.bias) bias[e] = __ldg(a.bias + jw);
        if (!kSwiGlu && a.accumulate && r < p.rows)
          prev[e] = __bfloat162float(a.out[(p.row0 + r) * a.ldo + j]);
      }
    }
    const float* sa = nullptr;
    const float* sb = nullptr;
    if constexpr (kBlock) {  // the 128x128 scale rows of this lane's two weight rows
      const int64_t rows_w = kSwiGlu ? 2 * a.m : a.m;
      const int64_t ra = w_row(j0, g), rb = w_row(j0, g + 8);
      sa = a.scale + ((ra < rows_w ? ra : rows_w - 1) >> 7) * a.scale_ld;
      sb = a.scale + ((rb < rows_w ? rb : rows_w - 1) >> 7) * a.scale_ld;
    }
    for (int64_t c = 0; c < chunks; ++c, ring_at.Advance(1, p.stages)) {
      const int slot = ring_at.slot;
      bulk::MbarWait(full0 + 8 * slot, ring_at.phase);
      const int64_t k0 = c * p.chunk;
      const int steps = int((a.k - k0 < p.chunk ? a.k - k0 : p.chunk) / 64);
      const unsigned char* base = ring + int64_t(slot) * p.slot_bytes;
      // + 4 kEs uint4 a step; lane q's 16 columns at uint4 kEs q (.. + kEs - 1)
      const uint4* wa = reinterpret_cast<const uint4*>(base + g * p.row_stride) + kEs * q;
      const uint4* wb = reinterpret_cast<const uint4*>(base + (g + 8) * p.row_stride) + kEs * q;
      const uint4* xs = xr + k0 / 8;
      auto step = [&](int t, const uint4& x0, const uint4& x1) {
        if constexpr (kBf16W) {
          fp8mma::Mma16SplitBf16(wa[8 * t], wa[8 * t + 1], wb[8 * t], wb[8 * t + 1], x0, x1, acc);
        } else if constexpr (kBlock) {  // the step's sum (one chain), times its scale, into acc[0]
          const uint4 va = wa[4 * t], vb = wb[4 * t];
          float dd[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          fp8mma::Mma16(va, vb, x0, x1, dd);
          const int64_t cb = (k0 + 64 * t) >> 7;
          const float sca = __ldg(sa + cb), scb = __ldg(sb + cb);
          acc[0][0] = fmaf(dd[0], sca, acc[0][0]);
          acc[0][1] = fmaf(dd[1], sca, acc[0][1]);
          acc[0][2] = fmaf(dd[2], scb, acc[0][2]);
          acc[0][3] = fmaf(dd[3], scb, acc[0][3]);
        } else {
          fp8mma::Mma16Split(wa[4 * t], wb[4 * t], x0, x1, acc);
        }
      };
      int t0 = warp;  // this warp's first step whose x is loaded at its use
      if constexpr (kPrefetchX) {  // its first kPre steps: x loaded during the previous piece
        uint4 xc[kPre][2];
#pragma unroll
        for (int i = 0; i < kPre; ++i) xc[i][0] = xn[i][0], xc[i][1] = xn[i][1];
        if (gi + 1 < groups || c + 1 < chunks) load_x(c + 1 < chunks ? c + 1 : 0);
#pragma unroll
        for (int i = 0; i < kPre; ++i) {
          const int t = warp + i * kConsumerWarps;
          if (t < steps) step(t, xc[i][0], xc[i][1]);
        }
        t0 += kPre * kConsumerWarps;
      }
#pragma unroll 4
      for (int t = t0; t < steps; t += kConsumerWarps) {
        uint4 x0 = zero, x1 = zero;
        if (has_x) {
          if constexpr (kStageX) x0 = xs[8 * t], x1 = xs[8 * t + 1];
          else x0 = __ldg(xs + 8 * t), x1 = __ldg(xs + 8 * t + 1);
        }
        step(t, x0, x1);
      }
      __syncwarp();
      if (lane == 0) bulk::MbarArrive(empty0 + 8 * slot);
    }
    // The warps' sums meet in buffer gi % 2; warp gi % kCw adds them in warp order and stores.
    // (A buffer is rewritten two groups later, after a barrier the reading warp has passed.)
    float4* buf = red + (gi & 1) * kConsumerWarps * 32;
    float part[4];
#pragma unroll
    for (int e = 0; e < 4; ++e)
      part[e] = kBlock ? acc[0][e] : (acc[0][e] + acc[1][e]) + (acc[2][e] + acc[3][e]);
    buf[warp * 32 + lane] = make_float4(part[0], part[1], part[2], part[3]);
    bulk::NamedBarrier<kConsumerWarps * 32>(1);
    if (!epilogue) continue;
    float4 v4 = buf[lane];
    for (int w = 1; w < kConsumerWarps; ++w) {
      const float4 o = buf[w * 32 + lane];
      v4.x += o.x, v4.y += o.y, v4.z += o.z, v4.w += o.w;
    }
    const float sum[4] = {v4.x, v4.y, v4.z, v4.w};
    // sum[e]: slot row g + 8 (e / 2), activation row row0 + 2q + e % 2.
    if constexpr (kSwiGlu) {
      const int64_t j = j0 + g;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int r = 2 * q + e;
        if (j >= je || r >= p.rows) continue;
        const float gate = sum[e] * mul[e] + bias[e], up = sum[e + 2] * mul[e + 2] + bias[e + 2];
        a.out[(p.row0 + r) * a.ldo + j] = SiluMul(ToF(ToB(gate)), ToF(ToB(up)));
      }
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t j = j0 + g + 8 * (e / 2);
        const int r = 2 * q + e % 2;
        if (j >= je || r >= p.rows) continue;
        float v = sum[e] * mul[e];
        if (a.bias) v += bias[e];
        if (a.accumulate) v += prev[e];
        a.out[(p.row0 + r) * a.ldo + j] = __float2bfloat16_rn(v);
      }
    }
  }
}

// Groups of 16 weight rows (8 outputs with swiglu) the busiest block walks.
int64_t GroupsPerBlock(const Fp8GemvArgs& a, int64_t blocks) {
  const int64_t rows = (a.m + blocks - 1) / blocks, out_rows = a.swiglu ? kGroupRows / 2 : kGroupRows;
  return (rows + out_rows - 1) / out_rows;
}

// Whether the pass stages x in shared memory: always with the norm; else when the rows fit
// and ring_stage_x asks (1), or (2, the default) the blocks walk more than kFewGroups groups
// (x re-read from L1 / L2 for every 16 weight rows; request 4: gate_up at 4 rows 34.0 vs 42.2
// us, V3 gate 46.1 vs 62.1; a few groups: the staging costs more than it saves).
constexpr int64_t kFewGroups = 4;
// The few-groups layout (LaunchRingMma's plan): 2 KB row pieces in 4 slots, for blocks of at
// most kFewGroups groups whose rows are longer than a piece.
constexpr int kFewGroupsPieceBytes = 2048;
constexpr int kFewGroupsDepth = 4;
bool FewGroupsLayout(int64_t groups, int64_t row_bytes) {
  return groups <= kFewGroups && row_bytes > kFewGroupsPieceBytes;
}
bool StageX(const Fp8GemvArgs& a, const Fp8GemvVariant& v, int64_t groups) {
  if (a.norm_weight) return true;
  if (StagedBytes(a) > kMaxStagedBytes) return false;
  return v.ring_stage_x == 1 || (v.ring_stage_x == 2 && groups > kFewGroups);
}

}  // namespace

bool Fp8RingMmaFits(const Fp8GemvArgs& a) {
  if (a.swiglu && a.accumulate) return false;
  if (a.norm_weight && StagedBytes(a) > kMaxStagedBytes) return false;
  return a.n >= 1 && a.m >= 1 && a.k >= 64 && a.k % 64 == 0 && a.ldw % 16 == 0 &&
         a.ldx % 8 == 0 && a.out != nullptr && a.scale_mode != ScaleMode::kNone &&
         ((reinterpret_cast<uintptr_t>(a.x) | reinterpret_cast<uintptr_t>(a.w)) & 15) == 0;
}

// By shape, from request 4 (H200, bench_gemv, same run, us, the plan's layouts vs
// Fp8GemvMmaKernel d4c1i at 1 / 4 / 8 rows): k in [4096, 14336] (Llama qkv 10.1 / 10.8 / 11.5
// vs 11.9 / 12.2 / 12.3, o 7.8 / 8.5 vs 8.0 / 8.6, gate_up 32.5 / 34.0 / 35.8 vs 37.1 / 36.7 /
// 37.7, down 19.2 / 20.1 vs 19.8 / 20.7, V3 q_a 8.0 / 8.3 / 8.5 vs 8.4 / 8.8 / 8.8, V3 gate
// 44.9 / 46.1 vs 52.7 / 54.1), but not o at 8 rows (9.1 vs 8.9); not small k (V3 q_b 1536:
// 23.8 vs 14.7, shared down 2048: 10.0 vs 7.5) nor large k (V3 o / down 16384 / 18432: 43.2 /
// 49.4 vs 36.8 / 40.4): there the old kernel's many warps an SM win. Fused (norm / swiglu,
// against RmsNorm + GEMV (+ SwiGlu)) at <= 4 rows (request 2: gate_up + norm + swiglu 35.0 /
// 38.9 vs 43.6 / 43.1 at 1 / 4 rows, qkv + norm 12.9 / 15.1 vs 14.6 / 15.3; 8 rows: qkv 18.7
// vs 15.5), and with k > 4096 at one row only (request 4: DeepSeek-V3 5L at 4 rows, whose only
// ring kernels were the fused q_a + kv_a and dense gate_up at k = 7168, took 2584 vs 2370 us a
// step; at one row 1694 vs 1725).
bool Fp8RingMmaWants(const Fp8GemvArgs& a) {
  if (a.k < 4096 || a.k > 14336) return false;
  if (a.norm_weight || a.swiglu) return a.n <= (a.k <= 4096 ? 4 : 1);
  return a.n <= 8 && !(a.n == 8 && a.m <= 4096);
}

namespace {

// Both weight types (bf16w: Fp8GemvArgs carrying bf16 weights, LaunchBf16RingMma).
void LaunchRingMma(const Fp8GemvArgs& a, cudaStream_t stream, const Fp8GemvVariant& v, bool bf16w) {
  if (a.n == 0 || a.m == 0) return;
  using Kernel = void (*)(Fp8GemvArgs, RingMmaPlan);
#define PG_RING_MMA_KERNELS(W, B)                                                                 \
  {{{Fp8RingMmaKernel<W, B, false, false, false>, Fp8RingMmaKernel<W, B, false, false, true>},        \
    {Fp8RingMmaKernel<W, B, false, true, false>, Fp8RingMmaKernel<W, B, false, true, true>}},         \
   {{Fp8RingMmaKernel<W, B, true, false, false>, Fp8RingMmaKernel<W, B, true, false, true>},          \
    {Fp8RingMmaKernel<W, B, true, true, false>, Fp8RingMmaKernel<W, B, true, true, true>}},           \
   {{Fp8RingMmaKernel<W, B, false, false, false, true>, Fp8RingMmaKernel<W, B, false, false, true, true>}, \
    {Fp8RingMmaKernel<W, B, false, true, false, true>, Fp8RingMmaKernel<W, B, false, true, true, true>}}}
  // [8 warps / 8 warps, 2 blocks an SM / 16 warps][fp8 / fp8 block scales / bf16][stage x][swiglu]
  static constexpr int kVariants = 3 * 3 * 2 * 2;
  static constexpr Kernel kKernels[3][3][2][2] = {
      PG_RING_MMA_KERNELS(8, 1), PG_RING_MMA_KERNELS(8, 2), PG_RING_MMA_KERNELS(16, 1)};
#undef PG_RING_MMA_KERNELS
  const int es = bf16w ? 2 : 1;  // bytes a weight
  const int cw = v.ring_warps == 16 ? 16 : 8;
  // ring_blocks 2 (8 warps): half an SM's shared memory and registers a block; 3 (request
  // 4's 2: 38-44% slower at 8 rows) also twice the grid, else one block an SM whose half
  // leaves room for the next kernel's block to start streaming (PDL) while this one drains.
  const int per_sm = cw == 8 && (v.ring_blocks == 2 || v.ring_blocks == 3) ? 2 : 1;
  // ring_blocks 4 (8 warps): the kernel of two blocks an SM (<= 96 registers, so it fits
  // beside the decode attention's blocks) with one block's shared memory.
  const int flavour = cw == 16 ? 2 : per_sm == 2 || (cw == 8 && v.ring_blocks == 4) ? 1 : 0;
  const int64_t blocks =
      std::min<int64_t>(int64_t(v.ring_blocks == 3 && cw == 8 ? 2 : 1) * MultiprocessorCount(), a.m);
  const int64_t groups = GroupsPerBlock(a, blocks);
  const bool stage_x = StageX(a, v, groups);
  const int wkind = bf16w ? 2 : a.scale_mode == ScaleMode::kBlock ? 1 : 0;
  const Kernel kernel = kKernels[flavour][wkind][stage_x][a.swiglu];
  // Shared memory a block: the opt-in maximum (the kernels have no static shared memory), or
  // with two blocks an SM (ring_blocks 2, 8 warps) half the SM's less the per-block reserve.
  struct Limits {
    int one = 48 * 1024, two = 48 * 1024;
  };
  static const Limits limits = [] {
    Limits l;
    int dev = 0, optin = 0, per_sm = 0, reserved = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev) != cudaSuccess)
      return l;
    // Static shared memory (none, but the block trace's in -DPEREGRINE_BLOCK_TRACE=ON builds)
    // counts against the opt-in maximum with the dynamic part.
    int static_max = 0;
    for (const Kernel* k = &kKernels[0][0][0][0]; k != &kKernels[0][0][0][0] + kVariants; ++k) {
      cudaFuncAttributes fa{};
      if (cudaFuncGetAttributes(&fa, *k) == cudaSuccess) static_max = std::max(static_max, int(fa.sharedSizeBytes));
    }
    const int static_bytes = (static_max + 127) / 128 * 128;
    optin -= static_bytes;
    for (const Kernel* k = &kKernels[0][0][0][0]; k != &kKernels[0][0][0][0] + kVariants; ++k) {
      (void)cudaFuncSetAttribute(*k, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
      (void)cudaFuncSetAttribute(*k, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 int(cudaSharedmemCarveoutMaxShared));
    }
    l.one = optin;
    l.two = std::min(optin, per_sm / 2 - reserved - static_bytes) / 128 * 128;
    return l;
  }();
  const int smem_limit = per_sm == 2 ? limits.two : limits.one;
  const int staged = stage_x ? int(StagedBytes(a)) : 0;
  const int room = smem_limit - kBarBytes - RedBytes(cw) - staged;
  RingMmaPlan p{};
  // ring_piece_kb 0 (auto, request 4's fastest layouts, measured on fp8; bf16 takes the same
  // rules in bytes): blocks with at most kFewGroups groups take 2 KB row pieces in 4 slots
  // (qkv 10.1 vs 11.5 us whole, o 7.8 vs 8.5, down 19.2 vs 21.0, V3 q_a 8.0 vs 8.6: a slot is
  // consumed once all of it has landed, so small slots shorten the tail); more groups a block
  // take whole 16-row groups (one copy a group where rows are contiguous) in 2 slots (gate_up
  // 32.5 vs 37.6 us with 2 KB pieces), else k in the fewest near-equal pieces of <= 6 KB a
  // row (multiples of 64 x consumer-warp columns: the summation order). 1 / 2 / 4 / 6 / 8:
  // pieces of that many KB a row, halved while fewer than 2 slots fit. ring_depth 0: 4 slots
  // for 2 KB pieces, 2 for whole groups, else as many as fit. Row pieces are padded so the
  // quarter-warps' 16-byte loads (rows g, g + 1) hit distinct bank groups: 64 bytes for fp8
  // (lane q at 16 q), 16 for bf16 (lane q at 32 q and 32 q + 16).
  const int unit = 64 * cw;  // columns: a step for each consumer warp
  const int pad = bf16w ? 16 : kRowPad;
  auto plan_pieces = [&](int64_t bytes) {
    const int64_t cols = std::max<int64_t>(unit, bytes / es / unit * unit);
    p.chunk = int(cols < a.k ? cols : a.k);
    p.row_stride = (p.chunk * es + 127) / 128 * 128 + pad;
    p.slot_bytes = kGroupRows * p.row_stride;
    p.stages = std::min(kMaxStages, room / p.slot_bytes);
  };
  const int piece_kb = v.ring_piece_kb;
  int depth = v.ring_depth;
  if (piece_kb == 1 || piece_kb == 2 || piece_kb == 4 || piece_kb == 6 || piece_kb == 8) {
    for (int kb = piece_kb;; kb = kb > 2 ? kb / 2 : kb - 1) {
      plan_pieces(int64_t(kb) * 1024);
      if (p.stages >= 2 || kb == 1) break;
    }
  } else if (FewGroupsLayout(groups, a.k * es)) {
    // (2048 bytes: a multiple of 64 x 16 warps columns for fp8, of 64 x 8 for bf16)
    plan_pieces(kFewGroupsPieceBytes);
    if (depth == 0) depth = kFewGroupsDepth;
  } else if (a.ldw == a.k && 2 * kGroupRows * a.k * es <= room) {
    p.whole = true;
    p.chunk = int(a.k);
    p.row_stride = int(a.k) * es;
    p.slot_bytes = kGroupRows * p.row_stride;
    p.stages = std::min(kMaxStages, room / p.slot_bytes);
    if (depth == 0) depth = 2;
  } else {
    const int64_t pieces = (a.k * es + 6143) / 6144;
    plan_pieces(((a.k + pieces - 1) / pieces + unit - 1) / unit * unit * es);
    while (p.stages < 2 && p.chunk > unit) plan_pieces(int64_t(std::max(unit, p.chunk / 2 / unit * unit)) * es);
  }
  if (depth > 0) p.stages = std::min(p.stages, depth);
  p.stages = std::max(p.stages, 1);
  p.x_offset = kBarBytes + RedBytes(cw) + p.stages * p.slot_bytes;
  // The first round's pacing (RingMmaPlan::fill_inflight): the variant's, where ring_fill_inflight
  // < 0 one slot in flight when the round fills 4 slots or more, else unpaced; the env forces n.
  static const int fill_env = EnvInt("PEREGRINE_RING_FILL_INFLIGHT", -1);
  const int64_t fill_slots = std::min<int64_t>(p.stages, groups * ((a.k + p.chunk - 1) / p.chunk));
  p.fill_inflight = fill_env >= 0                ? fill_env
                    : v.ring_fill_inflight >= 0 ? v.ring_fill_inflight
                                                : (fill_slots >= 4 ? 1 : 0);
  const size_t smem = size_t(p.x_offset) + size_t(staged);
  for (int64_t row0 = 0; row0 < a.n; row0 += 8) {
    p.row0 = row0;
    p.rows = int(a.n - row0 < 8 ? a.n - row0 : 8);
    (void)LaunchPdl(kernel, dim3(unsigned(blocks)), dim3(unsigned(32 * (cw + 1))), smem, stream, a, p);
  }
}

}  // namespace

void LaunchFp8RingMma(const Fp8GemvArgs& a, cudaStream_t stream, const Fp8GemvVariant& v) {
  LaunchRingMma(a, stream, v, /*bf16w=*/false);
}

// ---- bf16 weights ---------------------------------------------------------------------------
namespace {
std::atomic<int64_t> g_bf16_launches{0};
Bf16RingMmaMode& Bf16ModeRef() {
  static Bf16RingMmaMode mode = [] {
    const int e = EnvInt("PEREGRINE_BF16_RING_MMA", -1);
    return e == 0 ? Bf16RingMmaMode::kOff : e == 1 ? Bf16RingMmaMode::kOn : Bf16RingMmaMode::kShape;
  }();
  return mode;
}

// The bf16 GemvArgs as the kernel's arguments (w: the weights' bytes, no scales).
Fp8GemvArgs AsRingArgs(const GemvArgs& g) {
  Fp8GemvArgs a{};
  a.x = g.x;
  a.w = reinterpret_cast<const uint8_t*>(g.w);
  a.scale = nullptr;
  a.scale_mode = ScaleMode::kNone;
  a.out = g.out;
  a.bias = g.bias;
  a.n = g.n, a.k = g.k, a.m = g.m, a.ldx = g.ldx, a.ldw = g.ldw, a.ldo = g.ldo;
  a.accumulate = g.accumulate;
  a.norm_weight = g.norm_weight;
  a.norm_type = g.norm_type;
  a.norm_eps = g.norm_eps;
  a.swiglu = g.swiglu;
  return a;
}

// Whether one row of `g` leaves every block (one an SM, LaunchRingMma's grid) a share of the
// weights that the few-groups layout's ring holds whole: its groups x 2 KB row pieces fill at
// most the layout's 4 slots.
bool OneRowShareFits(const GemvArgs& g) {
  const int64_t row_bytes = g.k * 2;  // bf16
  const int64_t groups = GroupsPerBlock(AsRingArgs(g), std::min<int64_t>(MultiprocessorCount(), g.m));
  const int64_t pieces = (row_bytes + kFewGroupsPieceBytes - 1) / kFewGroupsPieceBytes;
  return FewGroupsLayout(groups, row_bytes) && groups * pieces <= kFewGroupsDepth;
}

// The one-row rule (Bf16RingMmaFirst): an accumulating projection without norm or swiglu
// whose block shares fit the ring whole — the o projection after the decode attention of
// Qwen3-30B-A3B (2048 x 4096: one group of 4 pieces a block) and of DeepSeek-V2-Lite. It runs
// in the kernel of two blocks an SM (96 registers, no spills) with one block's shared memory
// and x staged (OneRowVariant): resident beside the attention's blocks, it has its whole share
// in shared memory before PdlWait and its MMA consumers take it at once. H200, session 20,
// step at 1 x 1K, three calls: DeepSeek-V2-Lite 1890.7 -> 1871.2, 1894.5 / 1893.7 -> 1880.2 /
// 1875.9 us; Qwen3-30B-A3B 2577.6 / 2579.9 -> 2558.6 / 2564.5, 2554.0 / 2557.3 -> 2561.5 /
// 2559.6, 2590.7 / 2558.7 -> 2567.6 / 2568.6 (equal within the call's noise). Not where the share
// is larger (Llama-3.1-8B's o, 242 KB a block): the co-resident form lost 100 us a step there
// (its ring fill competes with the attention's keys), the one-block form with 6 slots gained
// 20 us in the graph captured at 1K but lost 30-108 us in the engine's 2048-8192-key graph
// sets. PEREGRINE_BF16_RING_MMA_ONE_ROW=0 turns the rule off.
bool OneRowRule(const GemvArgs& g) {
  static const bool on = EnvFlag("PEREGRINE_BF16_RING_MMA_ONE_ROW", true);
  return on && g.n == 1 && g.accumulate && !g.norm_weight && !g.swiglu && OneRowShareFits(g);
}

// The one-row rule's layout (the variant at its defaults; a variant set by the env or a test
// is taken as it is): the 96-register kernel with one block's shared memory, x staged, and the
// ring's first fill paced where it is 4 slots or more (ring_fill_inflight -1). Its blocks fill
// beside the attention before them, whose latency-bound steps their outstanding reads slow:
// H100, 1 x 1K, three rounds (docs/PERF.md "Session 35"), Qwen3-30B-A3B's o (4 slots of 32 KB
// a block) one slot in flight 2985.3 -> 2927.0 us a step (two: 2972.1; the attention's new
// token loads landed 1.1 instead of 2.6 us after its wait); DeepSeek-V2-Lite's (2 slots) +43.9
// with one, +0.2 with two.
Fp8GemvVariant OneRowVariant(Fp8GemvVariant v) {
  const Fp8GemvVariant d{};
  if (v.ring_piece_kb != d.ring_piece_kb || v.ring_depth != d.ring_depth ||
      v.ring_stage_x != d.ring_stage_x || v.ring_warps != d.ring_warps || v.ring_blocks != d.ring_blocks)
    return v;
  v.ring_blocks = 4;
  v.ring_stage_x = 1;
  v.ring_fill_inflight = -1;
  return v;
}

}  // namespace

bool Bf16RingMmaFits(const GemvArgs& g) {
  if (g.out_f32 || !g.out || !g.w_constant || (g.swiglu && g.accumulate)) return false;
  if (g.n < 1 || g.n > 8 || g.m < 1 || g.k < 64 || g.k % 64 || g.ldw % 8 || g.ldx % 8) return false;
  if (((reinterpret_cast<uintptr_t>(g.x) | reinterpret_cast<uintptr_t>(g.w)) & 15) != 0) return false;
  return !g.norm_weight || StagedBytes(g.n, g.k) <= kMaxStagedBytes;
}

bool Bf16RingMmaTake(const GemvArgs& g) {
  const Bf16RingMmaMode mode = Bf16ModeRef();
  if (mode == Bf16RingMmaMode::kOff || !Bf16RingMmaFits(g)) return false;
  // By shape (session 8 request 1, H200, bench_gemv table 5 and whole steps): 2-4 rows. There
  // it beats the warp GEMV (Llama-3.1-8B qkv 18.3 vs 21.2 us at 4 rows, o 13.7 vs 14.4,
  // Qwen3-30B-A3B o 7.9 vs 10.7; a Llama step at 4 x 1K 5171 vs 5880 us); at 5-8 rows
  // cuBLASLt wins (down 33.6 vs 40.4 us at 8 rows: x [8, 14336] cannot be staged and is re-read
  // from L2 per 16-row group; a Llama step at 8 x 1K 5375 vs 5794 us).
  // (One row under the one-row rule is Bf16RingMmaFirst's, asked before this.)
  return mode == Bf16RingMmaMode::kOn || (g.n >= 2 && g.n <= 4);
}

bool Bf16RingMmaFirst(const GemvArgs& g) {
  return Bf16ModeRef() != Bf16RingMmaMode::kOff && OneRowRule(g) && Bf16RingMmaFits(g);
}

namespace {
// one_row: the one-row rule holds for g (its layout, OneRowVariant).
void LaunchBf16(const GemvArgs& g, cudaStream_t stream, bool one_row) {
  g_bf16_launches.fetch_add(1, std::memory_order_relaxed);
  const Fp8GemvVariant v = GetFp8GemvVariant();
  LaunchRingMma(AsRingArgs(g), stream, one_row ? OneRowVariant(v) : v, /*bf16w=*/true);
}
}  // namespace

bool LaunchBf16RingMmaFirst(const GemvArgs& g, cudaStream_t stream) {
  if (!Bf16RingMmaFirst(g)) return false;
  LaunchBf16(g, stream, /*one_row=*/true);
  return true;
}

void LaunchBf16RingMma(const GemvArgs& g, cudaStream_t stream) { LaunchBf16(g, stream, OneRowRule(g)); }

void SetBf16RingMmaMode(Bf16RingMmaMode mode) { Bf16ModeRef() = mode; }
Bf16RingMmaMode GetBf16RingMmaMode() { return Bf16ModeRef(); }
int64_t Bf16RingMmaLaunches() { return g_bf16_launches.load(std::memory_order_relaxed); }

}  // namespace pg::cuda
