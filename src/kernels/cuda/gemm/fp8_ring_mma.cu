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
// each of a step's four MMAs (16 columns each) into its own accumulator over its steps
// (global step index = warp mod kCw, in k order: chunk is a multiple of kCw steps of 64
// columns or all of k; block scales: each MMA's sum times the step's scale, fmaf), adds the
// four as (0 + 1) + (2 + 3), then one warp adds the warps' sums in warp order and writes
// acc * 2^120 * row scale (+ bias, + out) rounded to bf16. (Not Fp8GemvMmaKernel's order: one
// accumulator a warp made each step a chain of 4 dependent MMAs, the consumers' bound.)
#include <algorithm>

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
int64_t StagedBytes(const Fp8GemvArgs& a) { return (a.n < 8 ? a.n : 8) * (a.k / 8 + 1) * 16; }

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
};

// kMinBlocks: blocks an SM the registers must allow (2: ring_blocks 2, 8 warps).
template <int kCw, int kMinBlocks, bool kBlock, bool kStageX, bool kSwiGlu>
__global__ void __launch_bounds__(kThreadsOf<kCw>, kMinBlocks)
    Fp8RingMmaKernel(Fp8GemvArgs a, RingMmaPlan p) {
  constexpr int kConsumerWarps = kCw;
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

  if (warp == kConsumerWarps) {  // ---- producer: slot s = (group s / chunks, piece s % chunks)
    const uint64_t policy = bulk::EvictFirstPolicy();
    const uint32_t ring0 = bulk::SmemAddr(smem + ring_offset);
    const int64_t total = groups * chunks;
    for (int64_t s = 0; s < total; ++s) {
      const int slot = int(s % p.stages);
      const uint32_t round = uint32_t(s / p.stages) & 1;
      const int64_t j0 = jb + kOutRows * (s / chunks), k0 = (s % chunks) * p.chunk;
      const int nout = int(je - j0 < kOutRows ? je - j0 : kOutRows);
      const uint32_t piece = uint32_t(a.k - k0 < p.chunk ? a.k - k0 : p.chunk);
      if (lane == 0) {
        bulk::MbarWait(empty0 + 8 * slot, round ^ 1);
        bulk::MbarArriveExpectTx(full0 + 8 * slot, uint32_t(kGroupRows / kOutRows * nout) * piece);
      }
      __syncwarp();
      if (p.whole) {  // lane 0: rows w_row(j0, 0) .. + nout; swiglu, lane 1: the up rows
        if (lane < kGroupRows / kOutRows)
          bulk::BulkLoad(ring0 + uint32_t(slot) * p.slot_bytes + uint32_t(lane * kOutRows) * p.row_stride,
                         a.w + w_row(j0, lane * kOutRows) * a.ldw, uint32_t(nout) * piece,
                         full0 + 8 * slot, policy);
      } else if (lane < kGroupRows && lane % kOutRows < nout)
        bulk::BulkLoad(ring0 + uint32_t(slot) * p.slot_bytes + uint32_t(lane) * p.row_stride,
                       a.w + w_row(j0, lane) * a.ldw + k0, piece, full0 + 8 * slot, policy);
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
  int64_t s = 0;
  for (int64_t gi = 0; gi < groups; ++gi) {
    const int64_t j0 = jb + kOutRows * gi;
    // acc[i][e]: MMA i of each step (its own chain: fp8_mma.cuh Mma16Split); e: slot rows g
    // (0, 1) and g + 8 (2, 3).
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
        mul[e] = 0x1p120f * moe::ScaleOfRow(a.scale, a.scale_mode, a.scale_ld, jw).row;
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
      // Into L1: the scale rows of this group (first group) and of the next one, so a step's
      // scale loads do not wait on L2 (request 2: V3 q_b, 12 groups a block, 1.9 us a group).
      // A group's rows touch at most 2 (4 with swiglu) scale rows of scale_ld floats.
      const int lines = (a.scale_ld + 31) / 32;
      for (int64_t jn = gi == 0 ? j0 : j0 + kOutRows; jn <= j0 + kOutRows && jn < je; jn += kOutRows) {
        const int64_t last = jn + kOutRows - 1 < je ? jn + kOutRows - 1 : je - 1;
        const int64_t cand[4] = {jn, last, kSwiGlu ? a.m + jn : jn, kSwiGlu ? a.m + last : last};
        for (int idx = lane; idx < 4 * lines; idx += 32) {
          const float* row = a.scale + (cand[idx / lines] >> 7) * a.scale_ld;
          asm volatile("prefetch.global.L1 [%0];" ::"l"(row + 32 * (idx % lines)));
        }
      }
    }
    for (int64_t c = 0; c < chunks; ++c, ++s) {
      const int slot = int(s % p.stages);
      bulk::MbarWait(full0 + 8 * slot, uint32_t(s / p.stages) & 1);
      const int64_t k0 = c * p.chunk;
      const int steps = int((a.k - k0 < p.chunk ? a.k - k0 : p.chunk) / 64);
      const unsigned char* base = ring + int64_t(slot) * p.slot_bytes;
      const uint4* wa = reinterpret_cast<const uint4*>(base + g * p.row_stride) + q;  // + 4 a step
      const uint4* wb = reinterpret_cast<const uint4*>(base + (g + 8) * p.row_stride) + q;
      const uint4* xs = xr + k0 / 8;
#pragma unroll 4
      for (int t = warp; t < steps; t += kConsumerWarps) {
        uint4 x0 = zero, x1 = zero;
        if (has_x) {
          if constexpr (kStageX) x0 = xs[8 * t], x1 = xs[8 * t + 1];
          else x0 = __ldg(xs + 8 * t), x1 = __ldg(xs + 8 * t + 1);
        }
        const uint4 va = wa[4 * t], vb = wb[4 * t];
        if constexpr (kBlock) {
          float dd[4][4] = {};
          fp8mma::Mma16Split(va, vb, x0, x1, dd);
          const int64_t cb = (k0 + 64 * t) >> 7;
          const float sca = __ldg(sa + cb), scb = __ldg(sb + cb);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            acc[i][0] = fmaf(dd[i][0], sca, acc[i][0]);
            acc[i][1] = fmaf(dd[i][1], sca, acc[i][1]);
            acc[i][2] = fmaf(dd[i][2], scb, acc[i][2]);
            acc[i][3] = fmaf(dd[i][3], scb, acc[i][3]);
          }
        } else {
          fp8mma::Mma16Split(va, vb, x0, x1, acc);
        }
      }
      __syncwarp();
      if (lane == 0) bulk::MbarArrive(empty0 + 8 * slot);
    }
    // The warps' sums meet in buffer gi % 2; warp gi % kCw adds them in warp order and stores.
    // (A buffer is rewritten two groups later, after a barrier the reading warp has passed.)
    float4* buf = red + (gi & 1) * kConsumerWarps * 32;
    float part[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) part[e] = (acc[0][e] + acc[1][e]) + (acc[2][e] + acc[3][e]);
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

// Whether the pass stages x in shared memory: always with the norm; else when asked
// (ring_stage_x 1, or 2 from 4 rows: 8 rows of the MMA's fragment reads re-read x from
// L1 / L2 once per 16 weight rows) and the rows fit.
bool StageX(const Fp8GemvArgs& a, const Fp8GemvVariant& v) {
  if (a.norm_weight) return true;
  if (StagedBytes(a) > kMaxStagedBytes) return false;
  return v.ring_stage_x == 1 || (v.ring_stage_x == 2 && a.n >= 4);
}

}  // namespace

bool Fp8RingMmaFits(const Fp8GemvArgs& a) {
  if (a.swiglu && a.accumulate) return false;
  if (a.norm_weight && StagedBytes(a) > kMaxStagedBytes) return false;
  return a.n >= 1 && a.m >= 1 && a.k >= 64 && a.k % 64 == 0 && a.ldw % 16 == 0 &&
         a.ldx % 8 == 0 && a.out != nullptr && a.scale_mode != ScaleMode::kNone &&
         ((reinterpret_cast<uintptr_t>(a.x) | reinterpret_cast<uintptr_t>(a.w)) & 15) == 0;
}

// By shape, from request 2 (H200, bench_gemv, same run, us ring vs Fp8GemvMmaKernel d4c1i):
// plain GEMVs at one row with k in [4096, 8192] and m >= 6144 (Llama qkv 11.7 vs 11.9, gate_up
// 33.9 vs 35.1, V3 gate 43.8 vs 51.5); not o 4096x4096 (8.5 vs 8.0), Llama down (20.4 vs
// 19.6), V3 q_a 2112x7168 (8.6 vs 8.5), small k (V3 q_b 1536: 23.0 vs 14.6), large k (V3 o /
// down: 43.6 / 47.7 vs 36.3 / 40.0), nor at 4 / 8 rows (slower nearly everywhere). Fused
// (norm / swiglu; the alternative is RmsNorm + GEMV (+ SwiGlu)) at <= 4 rows and k >= 4096
// (gate_up + norm + swiglu 35.0 / 38.9 vs 43.6 / 43.1 at 1 / 4 rows, qkv + norm 12.9 / 15.1
// vs 14.6 / 15.3; at 8 rows 18.7 vs 15.5), and with k > 4096 at one row only: in request 4
// DeepSeek-V3 5L at 4 rows, whose only ring kernels were its fused k = 7168 projections
// (q_a + kv_a + norm, dense gate_up + norm + SwiGLU), took 2584.1 vs 2369.5 us a step with
// the ring off; at one row 1693.7 vs 1724.5. (Llama, k = 4096, unchanged by that rule.)
bool Fp8RingMmaWants(const Fp8GemvArgs& a) {
  if (a.norm_weight || a.swiglu) return a.k >= 4096 && a.n <= (a.k <= 4096 ? 4 : 1);
  return a.n == 1 && a.k >= 4096 && a.k <= 8192 && a.m >= 6144;
}

void LaunchFp8RingMma(const Fp8GemvArgs& a, cudaStream_t stream, const Fp8GemvVariant& v) {
  if (a.n == 0 || a.m == 0) return;
  using Kernel = void (*)(Fp8GemvArgs, RingMmaPlan);
#define PG_RING_MMA_KERNELS(W, B)                                                                 \
  {{{Fp8RingMmaKernel<W, B, false, false, false>, Fp8RingMmaKernel<W, B, false, false, true>},        \
    {Fp8RingMmaKernel<W, B, false, true, false>, Fp8RingMmaKernel<W, B, false, true, true>}},         \
   {{Fp8RingMmaKernel<W, B, true, false, false>, Fp8RingMmaKernel<W, B, true, false, true>},          \
    {Fp8RingMmaKernel<W, B, true, true, false>, Fp8RingMmaKernel<W, B, true, true, true>}}}
  // [8 warps / 8 warps, 2 blocks an SM / 16 warps][block][stage x][swiglu]
  static constexpr Kernel kKernels[3][2][2][2] = {
      PG_RING_MMA_KERNELS(8, 1), PG_RING_MMA_KERNELS(8, 2), PG_RING_MMA_KERNELS(16, 1)};
#undef PG_RING_MMA_KERNELS
  const int cw = v.ring_warps == 16 ? 16 : 8;
  const int per_sm = cw == 8 && v.ring_blocks == 2 ? 2 : 1;
  const int flavour = cw == 16 ? 2 : per_sm == 2 ? 1 : 0;
  const Kernel kernel = kKernels[flavour][a.scale_mode == ScaleMode::kBlock][StageX(a, v)][a.swiglu];
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
    for (const Kernel* k = &kKernels[0][0][0][0]; k != &kKernels[0][0][0][0] + 24; ++k) {
      (void)cudaFuncSetAttribute(*k, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
      (void)cudaFuncSetAttribute(*k, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 int(cudaSharedmemCarveoutMaxShared));
    }
    l.one = optin;
    l.two = std::min(optin, per_sm / 2 - reserved) / 128 * 128;
    return l;
  }();
  const int smem_limit = per_sm == 2 ? limits.two : limits.one;
  const int staged = StageX(a, v) ? int(StagedBytes(a)) : 0;
  const int room = smem_limit - kBarBytes - RedBytes(cw) - staged;
  RingMmaPlan p{};
  // The bulk copies cost about the same per copy up to several KB (docs/PERF.md "TMA-ring
  // decode GEMV": 1 -> 2 -> 4 KB pieces, 2x faster each), so copies are as large as fit.
  // ring_piece_kb 0 (auto): whole groups (one copy of 16 rows when rows are contiguous and two
  // such slots fit), else k cut into the fewest near-equal pieces of <= 6 KB a row (multiples
  // of 64 x consumer-warp columns: the summation order). 1 / 2 / 4 / 6 / 8: pieces of that many KB a row,
  // halved while fewer than 2 slots fit.
  auto plan_pieces = [&](int chunk) {
    p.chunk = chunk < a.k ? chunk : int(a.k);
    p.row_stride = (p.chunk + 127) / 128 * 128 + kRowPad;
    p.slot_bytes = kGroupRows * p.row_stride;
    p.stages = std::min(kMaxStages, room / p.slot_bytes);
  };
  const int piece_kb = v.ring_piece_kb;
  if (piece_kb == 1 || piece_kb == 2 || piece_kb == 4 || piece_kb == 6 || piece_kb == 8) {
    for (int kb = piece_kb;; kb = kb > 2 ? kb / 2 : kb - 1) {
      plan_pieces(kb * 1024);
      if (p.stages >= 2 || kb == 1) break;
    }
  } else if (a.ldw == a.k && 2 * kGroupRows * a.k <= room) {
    p.whole = true;
    p.chunk = int(a.k);
    p.row_stride = int(a.k);
    p.slot_bytes = kGroupRows * p.row_stride;
    p.stages = std::min(kMaxStages, room / p.slot_bytes);
  } else {
    const int unit = 64 * cw;  // a step for each consumer warp
    const int64_t pieces = (a.k + 6143) / 6144;
    plan_pieces(int(((a.k + pieces - 1) / pieces + unit - 1) / unit * unit));
    while (p.stages < 2 && p.chunk > unit) plan_pieces(std::max(unit, p.chunk / 2 / unit * unit));
  }
  if (v.ring_depth > 0) p.stages = std::min(p.stages, v.ring_depth);
  p.stages = std::max(p.stages, 1);
  p.x_offset = kBarBytes + RedBytes(cw) + p.stages * p.slot_bytes;
  const size_t smem = size_t(p.x_offset) + size_t(staged);
  const int64_t blocks = std::min<int64_t>(int64_t(per_sm) * MultiprocessorCount(), a.m);
  for (int64_t row0 = 0; row0 < a.n; row0 += 8) {
    p.row0 = row0;
    p.rows = int(a.n - row0 < 8 ? a.n - row0 : 8);
    (void)LaunchPdl(kernel, dim3(unsigned(blocks)), dim3(unsigned(32 * (cw + 1))), smem, stream, a, p);
  }
}

}  // namespace pg::cuda
