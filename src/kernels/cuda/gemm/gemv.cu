// Small-batch bf16 GEMV: out[r, j] = sum_i x[r, i] * w[j, i] for up to 8 rows r per pass.
// One warp per output feature j (two features at 2+ rows, kPair below); weights are streamed
// once per pass (16-byte loads, two groups of four in flight per lane: the next group loads
// while the current one is used), activations come from L1/L2. Used for decode batches (memory bound) and as the
// always-correct fallback of Matmul (any strides, any n: passes of 8 rows); at 2-4 rows
// LaunchGemv hands shapes the tensor-core ring kernel takes to it (fp8_ring_mma.h,
// Bf16RingMmaTake), and so does one row of an accumulating projection without norm or
// swiglu of a small enough share a block (Bf16RingMmaFirst); other one-row shapes go to
// gemv_ring.cu where that wants them. Writes bf16, or
// f32 (out_f32: outputs whose rounding matters, e.g. MoE router logits).
//
// PDL (common/pdl.cuh): every pass is launched with LaunchPdl and triggers its dependents at
// once. With w_constant the first group of each warp's weight row is loaded before the
// PdlWait, so the weight stream starts while the previous kernel drains.
//
// Fused decode options (device_params.h GemvArgs, one pass of n <= kMaxFusedRows rows):
// norm_weight stages x's rows in shared memory and RMS-normalises them there (each block
// recomputes the rows' sums of squares: a 4096-wide row is 8 KB from L2); swiglu streams the
// gate row j and the up row m + j in one warp and writes silu(gate) * up. Rounding points are
// those of the unfused ops: the normalised row and each projection output round to bf16.
#include <cuda_bf16.h>

#include "kernels/cuda/common/device_params.h"
#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/elementwise/row_device.cuh"
#include "kernels/cuda/gemm/gemv_device.cuh"
#include "kernels/cuda/gemm/fp8_ring_mma.h"
#include "kernels/cuda/gemm/gemv_ring.h"

namespace pg::cuda {
namespace {

using gemv::Dot8;

constexpr int kWarps = 8;
constexpr int kUnroll = 4;
constexpr int kMaxFusedRows = 4;            // the Matmul GEMV range (cuda_register.cpp)
constexpr int kMaxStageBytes = 96 * 1024;   // staged x rows (n * k * 2 bytes, dynamic smem)

// One group of a warp's weight stream: chunks c0 + 32 u (16 bytes each) of a row of nv chunks;
// chunks past the end read as zero (and are never used).
__device__ __forceinline__ void LoadGroup(const uint4* w4, int64_t c0, int64_t nv,
                                          uint4 (&buf)[kUnroll]) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t c = c0 + 32 * u;
    buf[u] = c < nv ? __ldcs(w4 + c) : make_uint4(0, 0, 0, 0);  // streamed once
  }
}

// kVec layout: k % 8 == 0, ldx % 8 == 0, ldw % 8 == 0 and 16-byte aligned bases.
// kNorm / kSwiGlu: the fused options (file comment). The grid may be smaller than m / kWarps
// (at most the resident blocks): warp (block b, warp w) does rows j = b * kWarps + w + t *
// gridDim.x * kWarps, and its weight stream runs on from one row into the next (the next
// row's first group loads while the current row finishes), so a large m pays the staging
// prologue once per resident block and no launch tail between waves.
// kPair: two output rows per warp, j and j + ceil(m / 2), so each x chunk read (from L1) and
// converted serves two weight rows: at 2-8 rows the kernel is partly issue-bound (4 rows:
// measured 1.3x faster over the Llama-3.1-8B projections than one row per warp; at 1 row
// one row per warp is as fast or faster, docs/PERF.md).
template <int NB, bool kNorm, bool kSwiGlu, bool kPair = false>
__global__ void __launch_bounds__(kWarps * 32) GemvVecKernel(GemvArgs a, int64_t row0) {
  PG_BLOCK_TRACE(kTraceGemvVec);
  constexpr int kW = kSwiGlu || kPair ? 2 : 1;  // weight rows per warp: j (and j + roff)
  extern __shared__ uint4 staged[];     // kNorm: [NB][k / 8]
  PdlTrigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t jstride = int64_t(gridDim.x) * kWarps;
  const int64_t mj = kPair ? (a.m + 1) / 2 : a.m;   // the warps' row index space
  const int64_t roff = kSwiGlu ? a.m : mj;          // offset of a warp's second row
  int64_t j = int64_t(blockIdx.x) * kWarps + warp;
  const int64_t nv = a.k / 8;
  auto rows_of = [&](int64_t jj, const uint4* (&p)[kW]) {
#pragma unroll
    for (int q = 0; q < kW; ++q) {
      // kPair with odd m: the last warp row has no partner; it streams its own row twice.
      const int64_t r = kSwiGlu || q == 0 || jj + q * roff < a.m ? jj + q * roff : jj;
      p[q] = reinterpret_cast<const uint4*>(a.w + r * a.ldw);
    }
  };
  const uint4* w4[kW];
  uint4 buf[kW][kUnroll];
  if (j < mj) rows_of(j, w4);
  if (a.w_constant && j < mj) {
#pragma unroll
    for (int q = 0; q < kW; ++q) LoadGroup(w4[q], lane, nv, buf[q]);
  }
  // The norm's weights before the wait (constant in a step; gemv_device.cuh NormWeightRegs).
  [[maybe_unused]] gemv::NormWeightRegs<kWarps * 32> nw;
  if constexpr (kNorm) nw.Load(a.norm_weight, a.norm_type, a.k, threadIdx.x);
  PdlWait();
  // One row with accumulate: lane 0 loads the warp's first output value now, not after the
  // dot (only this warp writes it).
  constexpr bool kPrevForm = NB == 1 && kW == 1;
  const int64_t j_first = j;
  float prev = 0.0f;
  if (kPrevForm && a.accumulate && lane == 0 && j < mj)
    prev = a.out_f32 ? a.out_f32[row0 * a.ldo + j] : ToF(a.out[row0 * a.ldo + j]);
  if (!a.w_constant && j < mj) {
#pragma unroll
    for (int q = 0; q < kW; ++q) LoadGroup(w4[q], lane, nv, buf[q]);
  }
  if constexpr (kNorm)  // every warp takes part
    gemv::StageRows<NB, kWarps>(a, row0, staged, threadIdx.x, true, [] { __syncthreads(); }, &nw);

  const bf16* xg = a.x + row0 * a.ldx;
  for (; j < mj; j += jstride) {
    const int64_t jn = j + jstride;  // this warp's next row
    float acc[kW][NB];
#pragma unroll
    for (int q = 0; q < kW; ++q)
#pragma unroll
      for (int r = 0; r < NB; ++r) acc[q][r] = 0.0f;
    for (int64_t c0 = lane; c0 < nv; c0 += 32 * kUnroll) {
      uint4 cur[kW][kUnroll];
#pragma unroll
      for (int q = 0; q < kW; ++q)
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) cur[q][u] = buf[q][u];
      if (c0 + 32 * kUnroll < nv) {
#pragma unroll
        for (int q = 0; q < kW; ++q) LoadGroup(w4[q], c0 + 32 * kUnroll, nv, buf[q]);
      } else if (jn < mj) {
        const uint4* wn[kW];
        rows_of(jn, wn);
#pragma unroll
        for (int q = 0; q < kW; ++q) LoadGroup(wn[q], lane, nv, buf[q]);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + 32 * u;
        if (c >= nv) break;
#pragma unroll
        for (int r = 0; r < NB; ++r) {
          const uint4 xv = kNorm ? staged[r * nv + c]
                                 : __ldg(reinterpret_cast<const uint4*>(xg + r * a.ldx) + c);
#pragma unroll
          for (int q = 0; q < kW; ++q) Dot8(cur[q][u], xv, acc[q][r]);
        }
      }
    }
    const bool first = kPrevForm && a.accumulate && j == j_first;
    gemv::WarpStore<NB, kW, kSwiGlu>(a, row0, j, roff, acc, lane, nullptr, first, prev);
    if (jn < mj) rows_of(jn, w4);
  }
}

// Any strides and alignment (scalar loads); no fused options.
template <int NB>
__global__ void __launch_bounds__(kWarps * 32) GemvScalarKernel(GemvArgs a, int64_t row0) {
  PG_BLOCK_TRACE(kTraceGemvScalar);
  PdlTrigger();
  PdlWait();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t j = int64_t(blockIdx.x) * kWarps + warp;
  if (j >= a.m) return;
  const bf16* w = a.w + j * a.ldw;
  const bf16* x = a.x + row0 * a.ldx;
  float acc[1][NB];
#pragma unroll
  for (int r = 0; r < NB; ++r) acc[0][r] = 0.0f;
  for (int64_t i = lane; i < a.k; i += 32) {
    const float wf = __bfloat162float(w[i]);
#pragma unroll
    for (int r = 0; r < NB; ++r) acc[0][r] = fmaf(__bfloat162float(x[r * a.ldx + i]), wf, acc[0][r]);
  }
  gemv::WarpStore<NB, 1, false>(a, row0, j, 0, acc, lane);
}

bool VecLayout(const GemvArgs& a) {
  return a.k % 8 == 0 && a.ldx % 8 == 0 && a.ldw % 8 == 0 &&
         ((reinterpret_cast<uintptr_t>(a.x) | reinterpret_cast<uintptr_t>(a.w)) & 15) == 0;
}

unsigned Blocks(const GemvArgs& a) { return unsigned((a.m + kWarps - 1) / kWarps); }

// Blocks of the vectorised kernel: one warp per output row, up to the blocks that fit on the
// device at once (the kernel's row loop does the rest). per_sm: resident blocks per SM.
unsigned VecBlocks(int64_t warp_rows, int per_sm) {
  const int64_t resident = int64_t(per_sm < 1 ? 1 : per_sm) * MultiprocessorCount();
  const int64_t need = (warp_rows + kWarps - 1) / kWarps;
  return unsigned(need < resident ? need : resident);
}

template <int NB, bool kNorm, bool kSwiGlu, bool kPair = false>
void LaunchVec(const GemvArgs& a, int64_t row0, cudaStream_t stream) {
  auto* kernel = GemvVecKernel<NB, kNorm, kSwiGlu, kPair>;
  size_t smem = 0;
  if constexpr (kNorm) {
    static const cudaError_t once = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxStageBytes);
    (void)once;  // a failure surfaces as the launch's error
    smem = size_t(NB) * size_t(a.k) * sizeof(bf16);
  }
  // Occupancy of this instantiation at this staging size, cached per thread.
  thread_local size_t cached_smem = ~size_t(0);
  thread_local int cached_per_sm = 1;
  if (smem != cached_smem) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&cached_per_sm, kernel, kWarps * 32, smem) !=
        cudaSuccess)
      cached_per_sm = 1;
    cached_smem = smem;
  }
  const int64_t warp_rows = kPair ? (a.m + 1) / 2 : a.m;
  LaunchPdl(kernel, dim3(VecBlocks(warp_rows, cached_per_sm)), dim3(kWarps * 32), smem, stream,
            a, row0);
}

template <bool kNorm, bool kSwiGlu>
void LaunchFusedPass(const GemvArgs& a, cudaStream_t stream) {
  switch (a.n) {
    // Two rows per warp from 2 rows on (swiglu's warps already stream two).
    case 1: LaunchVec<1, kNorm, kSwiGlu>(a, 0, stream); break;
    case 2: LaunchVec<2, kNorm, kSwiGlu, !kSwiGlu>(a, 0, stream); break;
    case 3: LaunchVec<3, kNorm, kSwiGlu, !kSwiGlu>(a, 0, stream); break;
    case 4: LaunchVec<4, kNorm, kSwiGlu, !kSwiGlu>(a, 0, stream); break;
    default: break;  // GemvFusedSupports refuses other n
  }
}

void LaunchPass(const GemvArgs& a, bool vec, int64_t row0, int nb, cudaStream_t stream) {
  switch (nb) {
#define PG_GEMV_CASE(N)                                                                   \
  case N:                                                                                 \
    if (vec && N >= 2) LaunchVec<N, false, false, true>(a, row0, stream);                 \
    else if (vec) LaunchVec<N, false, false>(a, row0, stream);                            \
    else LaunchPdl(GemvScalarKernel<N>, dim3(Blocks(a)), dim3(kWarps * 32), 0, stream, a, row0); \
    break;
    PG_GEMV_CASE(1) PG_GEMV_CASE(2) PG_GEMV_CASE(3) PG_GEMV_CASE(4)
    PG_GEMV_CASE(5) PG_GEMV_CASE(6) PG_GEMV_CASE(7) PG_GEMV_CASE(8)
#undef PG_GEMV_CASE
    default: break;
  }
}

}  // namespace

bool GemvFusedSupports(const GemvArgs& a) {
  if (Bf16RingMmaTake(a)) return true;  // fp8_ring_mma.cu's bf16 kernel (2-4 rows; kOn: 1-8)
  return a.n >= 1 && a.n <= kMaxFusedRows && VecLayout(a) && a.out && !a.out_f32 &&
         !a.accumulate && (!a.norm_weight || a.n * a.k * int64_t(sizeof(bf16)) <= kMaxStageBytes);
}

void LaunchGemv(const GemvArgs& a, cudaStream_t stream) {
  if (a.n == 0 || a.m == 0) return;
  if (LaunchBf16RingMmaFirst(a, stream)) return;  // one row: the o projection (by shape)
  if (GemvRingTake(a)) return LaunchGemvRing(a, stream);  // gemv_ring.cu (PEREGRINE_GEMV_RING)
  if (Bf16RingMmaTake(a)) return LaunchBf16RingMma(a, stream);  // fp8_ring_mma.cu, 2-4 rows
  if (a.norm_weight || a.swiglu) {  // the caller checked GemvFusedSupports
    if (a.norm_weight && a.swiglu) LaunchFusedPass<true, true>(a, stream);
    else if (a.norm_weight) LaunchFusedPass<true, false>(a, stream);
    else LaunchFusedPass<false, true>(a, stream);
    return;
  }
  const bool vec = VecLayout(a);
  for (int64_t row0 = 0; row0 < a.n; row0 += 8)
    LaunchPass(a, vec, row0, int(a.n - row0 < 8 ? a.n - row0 : 8), stream);
}

}  // namespace pg::cuda
