// Small-batch fp8 e4m3 GEMV with dequantization scales (moe_params.h Fp8GemvArgs): the dense
// fp8 Matmul for decode batches, up to 8 activation rows a pass. Two kernels:
//
// Fp8GemvMmaKernel (the default where k % 64 == 0 and the rows are 16-byte aligned): the
//   weights are widened e4m3 -> bf16 with bit operations and multiplied on the tensor cores
//   (mma.sync m16n8k16, bf16 in, f32 accumulation), the activations taken as they are (bf16).
//   A warp owns 16 weight rows and a share of their 64- or 128-column steps, staged through a
//   per-warp cp.async shared-memory ring; `split` warps of a block share the 16 rows and
//   split k, their partial sums added in warp order. Why: the f32 kernel below spends ~4
//   instructions per weight and row widening and multiplying (issue-bound at 2-4 rows: 31-39%
//   of HBM at 4 rows); here a weight costs 2 integer instructions once, whatever the row
//   count (<= 8), and the MMA does the products. Not bitwise the f32 kernel (another
//   summation order, see the kernel); both are checked against ref. e4m3's NaN codes (0x7F,
//   0xFF) read as +-480 here (weights hold none: quantizers saturate).
// LaunchFp8Gemv runs gemm/fp8_ring_mma.cu's ring tensor-core kernel instead where
// Fp8GemvVariant::ring selects it (PEREGRINE_FP8_GEMV_RING: 0 never, 1 where it fits, unset
// = 2 by shape).
// Fp8GemvKernel (f32 FMA; fallback and reference twin of gemv_ring.cu's fp8 path): one warp
//   per output feature j, 16-byte loads (16 elements), each chunk's partial dot scaled by its
//   128-column block scale (block mode) or the row's scale at the end.
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/pdl.cuh"
#include "core/env.h"
#include "kernels/cuda/gemm/fp8_ring_mma.h"
#include "kernels/cuda/moe/fp8_mma.cuh"
#include "kernels/cuda/moe/moe_device.cuh"

namespace pg::cuda {
namespace {

constexpr int kWarps = 8;
using fp8mma::Mma16;

template <int NB>
__global__ void __launch_bounds__(kWarps * 32) Fp8GemvKernel(Fp8GemvArgs a, int64_t row0, bool vec) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t j = int64_t(blockIdx.x) * kWarps + warp;
  const uint8_t* w = a.w + (j < a.m ? j : 0) * a.ldw;
  // PDL (pdl.cuh): the weight row into L2 while the previous kernel drains; x after the wait.
  if (j < a.m)
    for (int64_t off = int64_t(lane) * 128; off < a.k; off += 32 * 128)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(w + off));
  PdlWait();
  PdlTrigger();
  if (j >= a.m) return;
  const bf16* x = a.x + row0 * a.ldx;
  const moe::RowScale rs = moe::ScaleOfRow(a.scale, a.scale_mode, a.scale_ld, j);
  float acc[NB];
#pragma unroll
  for (int r = 0; r < NB; ++r) acc[r] = 0.0f;
  if (vec) {
    const uint4* w4 = reinterpret_cast<const uint4*>(w);
    const int64_t nc = a.k / 16;
    for (int64_t c = lane; c < nc; c += 32) {
      float wf[16];
      moe::Widen<true>(__ldcs(w4 + c), wf);
      const float s = rs.blocks ? __ldg(rs.blocks + ((c * 16) >> 7)) : 1.0f;
#pragma unroll
      for (int r = 0; r < NB; ++r) {
        float xf[16];
        moe::LoadX<16>(x + r * a.ldx, c, xf);
        float part = 0.0f;
#pragma unroll
        for (int q = 0; q < 16; ++q) part = fmaf(wf[q], xf[q], part);
        acc[r] = fmaf(part, s, acc[r]);
      }
    }
  } else {
    for (int64_t i = lane; i < a.k; i += 32) {
      float wv = moe::Fp8ToFloat(w[i]);
      if (rs.blocks) wv *= __ldg(rs.blocks + (i >> 7));
#pragma unroll
      for (int r = 0; r < NB; ++r) acc[r] = fmaf(__bfloat162float(x[r * a.ldx + i]), wv, acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < NB; ++r) acc[r] = moe::WarpSum(acc[r]) * rs.row;
  if (lane < NB) {
    float v = 0.0f;
#pragma unroll
    for (int r = 0; r < NB; ++r)
      if (r == lane) v = acc[r];
    bf16* o = a.out + (row0 + lane) * a.ldo + j;
    if (a.bias) v += a.bias[j];
    if (a.accumulate) v += __bfloat162float(*o);
    *o = __float2bfloat16_rn(v);
  }
}


// ---- tensor-core kernel ----------------------------------------------------------------------
constexpr int kMmaMaxWarps = 16;  // a block: max(8, split) warps

__device__ __forceinline__ void CpAsync16(uint4* dst, const uint4* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
               "l"(src)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// A warp walks 16 weight rows in steps of 64·C columns (16 rows x 64·C e4m3 = C KB): lane
// (g = lane / 4, q = lane % 4) copies C 16-byte pieces of row g and of row g + 8, columns
// 16C·q .. 16C·q + 16C - 1 of the step (a warp reads 64·C contiguous bytes of each row), into
// its warp's ring of D steps in shared memory (cp.async.cg: through L2 only, no registers
// held), waits for the oldest step's group and reads back exactly what it copied (no barrier
// between lanes); the step's activations (2C 16-byte pieces of row g) are read from global
// (L1 / L2 hits) as the step starts. Bytes in flight: D·C KB a warp.
// Block (blockIdx.x) of nw = blockDim.x / 32 warps (8, or 16 with split 16): nw / split
// groups of 16 weight rows; warp w takes group w / split and part p = w % split of the S =
// k / (64C) steps: steps p, p + split, p + 2 split, ... (kInterleave: the block's warps read
// split consecutive steps of the same rows together) or the range [S·p / split, S·(p+1) /
// split). Activation rows row0 .. row0 + rows - 1 (rows <= 8). The first D steps are requested
// before PdlWait (weights only: pdl.cuh's contract). Requires k % (64C) == 0, ldw % 16 == 0,
// ldx % 8 == 0, w and x 16-byte aligned (MmaFits).
// Summation: per (weight row, activation row), the tensor core sums each MMA's 16 products
// (exact bf16 x bf16 products) in f32; a warp accumulates its steps in walk order (block
// scales multiply each step's sum: a step lies in one 128-column block, C <= 2), the split
// warps' sums are added in part order.
// prefetch > 0: lanes q = 0 / 1 also prefetch (prefetch.global.L2) rows g / g + 8 of the step
// `prefetch` steps beyond the ring, so (D + prefetch)·C KB a warp are requested ahead.
template <int D, int C, bool kInterleave>
__global__ void __launch_bounds__(kMmaMaxWarps * 32) Fp8GemvMmaKernel(Fp8GemvArgs a, int64_t row0,
                                                                      int rows, int split,
                                                                      int prefetch) {
  extern __shared__ uint4 ring[];  // [nw][D][2 rows][C][32 lanes]; after the walk, [nw][32] float4
  constexpr int kSlot = 2 * C * 32;  // uint4 a step of a warp
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  const int g = lane / 4, q = lane % 4;
  const int64_t j0 = (int64_t(blockIdx.x) * (nw / split) + warp / split) * 16;
  const int part = warp % split;
  const int steps = int(a.k / (64 * C));
  // This warp's t-th step: first + t * stride, t < count.
  int first, stride, count;
  if (kInterleave) {
    first = part, stride = split, count = steps > part ? (steps - part + split - 1) / split : 0;
  } else {
    first = steps * part / split, stride = 1, count = steps * (part + 1) / split - first;
  }
  if (j0 >= a.m) count = 0;
  const int64_t ra = j0 + g < a.m ? j0 + g : a.m - 1, rb = j0 + g + 8 < a.m ? j0 + g + 8 : a.m - 1;
  const uint4* wa = reinterpret_cast<const uint4*>(a.w + ra * a.ldw) + C * q;  // + 4C a step
  const uint4* wb = reinterpret_cast<const uint4*>(a.w + rb * a.ldw) + C * q;
  const bool has_x = g < rows;
  const uint4* xr = reinterpret_cast<const uint4*>(a.x + (row0 + (has_x ? g : 0)) * a.ldx) + 2 * C * q;
  uint4* mine = ring + warp * D * kSlot + lane;  // slot d, row r, piece c: mine[kSlot d + 32 (C r + c)]
  auto copy = [&](int d, int st) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
      CpAsync16(mine + kSlot * d + 32 * c, wa + 4 * C * st + c);
      CpAsync16(mine + kSlot * d + 32 * (C + c), wb + 4 * C * st + c);
    }
  };
  const unsigned char* pf_row = reinterpret_cast<const unsigned char*>(q == 0 ? wa - C * q : wb - C * q);
  auto prefetch_step = [&](int t) {  // the 64·C bytes of step t in row g (q = 0) / g + 8 (q = 1)
    if (prefetch > 0 && q < 2 && t < count)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(pf_row + int64_t(first + t * stride) * 64 * C));
  };
#pragma unroll
  for (int d = 0; d < D; ++d) {  // one commit group per slot, empty past the walk
    if (d < count) copy(d, first + d * stride);
    CpAsyncCommit();
  }
  for (int t = D; t < D + prefetch; ++t) prefetch_step(t);
  PdlWait();
  PdlTrigger();
  const float* blocks = a.scale_mode == ScaleMode::kBlock && j0 < a.m
                            ? a.scale + (j0 >> 7) * a.scale_ld : nullptr;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int t0 = 0; t0 < count; t0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int t = t0 + d;
      if (t < count) {
        const int st = first + t * stride;
        uint4 xv[2 * C];
#pragma unroll
        for (int c = 0; c < 2 * C; ++c) xv[c] = has_x ? __ldg(xr + 8 * C * st + c) : zero;
        CpAsyncWait<D - 1>();  // the group of step t (the oldest of D outstanding)
        uint4 wv[2 * C];
#pragma unroll
        for (int c = 0; c < 2 * C; ++c) wv[c] = mine[kSlot * d + 32 * c];
        if (t + D < count) copy(d, first + (t + D) * stride);
        CpAsyncCommit();
        prefetch_step(t + D + prefetch);
        if (blocks) {
          float dd[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
          for (int c = 0; c < C; ++c) Mma16(wv[c], wv[C + c], xv[2 * c], xv[2 * c + 1], dd);
          const float sc = __ldg(blocks + ((st * 64 * C) >> 7));
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[e] = fmaf(dd[e], sc, acc[e]);
        } else {
#pragma unroll
          for (int c = 0; c < C; ++c) Mma16(wv[c], wv[C + c], xv[2 * c], xv[2 * c + 1], acc);
        }
      }
    }
  }
  CpAsyncWait<0>();
  if (split > 1) {  // partial sums in each warp's own (drained) ring slot 0
    float4* partial = reinterpret_cast<float4*>(ring);
    partial[warp * D * kSlot + lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    __syncthreads();
    if (part != 0) return;
    for (int p = 1; p < split; ++p) {
      const float4 o = partial[(warp + p) * D * kSlot + lane];
      acc[0] += o.x, acc[1] += o.y, acc[2] += o.z, acc[3] += o.w;
    }
  }
  if (j0 >= a.m) return;
  // acc[e]: weight row j0 + g + 8 * (e / 2), activation row 2q + e % 2.
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int64_t j = j0 + g + 8 * (e / 2);
    const int r = 2 * q + e % 2;
    if (j >= a.m || r >= rows) continue;
    float v = acc[e] * 0x1p120f * moe::ScaleOfRow(a.scale, a.scale_mode, a.scale_ld, j).row;
    if (a.bias) v += a.bias[j];
    bf16* o = a.out + (row0 + r) * a.ldo + j;
    if (a.accumulate) v += __bfloat162float(*o);
    *o = __float2bfloat16_rn(v);
  }
}

bool MmaFits(const Fp8GemvArgs& a) {
  return a.k % 64 == 0 && a.ldw % 16 == 0 && a.ldx % 8 == 0 &&
         ((reinterpret_cast<uintptr_t>(a.x) | reinterpret_cast<uintptr_t>(a.w)) & 15) == 0;
}

Fp8GemvVariant& VariantRef() {
  static Fp8GemvVariant v = [] {
    Fp8GemvVariant d;
    d.mma = EnvFlag("PEREGRINE_FP8_GEMV_MMA", d.mma);
    d.depth = EnvInt("PEREGRINE_FP8_GEMV_DEPTH", d.depth);
    d.chunk = EnvInt("PEREGRINE_FP8_GEMV_CHUNK", d.chunk);
    d.interleave = EnvFlag("PEREGRINE_FP8_GEMV_INTERLEAVE", d.interleave);
    d.warps_per_sm = EnvInt("PEREGRINE_FP8_GEMV_WARPS_PER_SM", d.warps_per_sm);
    d.prefetch = EnvInt("PEREGRINE_FP8_GEMV_PREFETCH", d.prefetch);
    d.split = EnvInt("PEREGRINE_FP8_GEMV_SPLIT", d.split);
    d.ring = EnvInt("PEREGRINE_FP8_GEMV_RING", d.ring);
    d.ring_piece_kb = EnvInt("PEREGRINE_FP8_GEMV_RING_PIECE_KB", d.ring_piece_kb);
    d.ring_depth = EnvInt("PEREGRINE_FP8_GEMV_RING_DEPTH", d.ring_depth);
    d.ring_stage_x = EnvInt("PEREGRINE_FP8_GEMV_RING_STAGE_X", d.ring_stage_x);
    d.ring_warps = EnvInt("PEREGRINE_FP8_GEMV_RING_WARPS", d.ring_warps);
    d.ring_blocks = EnvInt("PEREGRINE_FP8_GEMV_RING_BLOCKS", d.ring_blocks);
    return d;
  }();
  return v;
}

void LaunchMma(const Fp8GemvArgs& a, cudaStream_t stream, const Fp8GemvVariant& v) {
  const int C = v.chunk >= 2 && a.k % 128 == 0 ? 2 : 1;
  const int di = v.depth <= 3 ? 0 : v.depth <= 4 ? 1 : 2, D = di == 0 ? 3 : di == 1 ? 4 : 6;
  // split: warps sharing 16 rows (1, 2, 4, 8, 16), doubled while the grid has fewer than
  // v.warps_per_sm warps an SM and each warp keeps >= 4 steps; blocks of max(8, split) warps.
  const int64_t steps = a.k / (64 * C), groups = (a.m + 15) / 16;
  const int64_t want = int64_t(v.warps_per_sm) * MultiprocessorCount();
  int split = 1;
  if (v.split == 1 || v.split == 2 || v.split == 4 || v.split == 8 || v.split == 16) split = v.split;
  else
    while (split < kMmaMaxWarps && groups * split < want && steps >= 8 * split) split *= 2;
  const int nw = split > 8 ? split : 8;
  const int64_t per_block = nw / split;
  const unsigned blocks = unsigned((groups + per_block - 1) / per_block);
  using Kernel = void (*)(Fp8GemvArgs, int64_t, int, int, int);
  static constexpr Kernel kKernels[3][2][2] = {  // [depth 3 / 4 / 6][chunk 1 / 2][interleave]
      {{Fp8GemvMmaKernel<3, 1, false>, Fp8GemvMmaKernel<3, 1, true>},
       {Fp8GemvMmaKernel<3, 2, false>, Fp8GemvMmaKernel<3, 2, true>}},
      {{Fp8GemvMmaKernel<4, 1, false>, Fp8GemvMmaKernel<4, 1, true>},
       {Fp8GemvMmaKernel<4, 2, false>, Fp8GemvMmaKernel<4, 2, true>}},
      {{Fp8GemvMmaKernel<6, 1, false>, Fp8GemvMmaKernel<6, 1, true>},
       {Fp8GemvMmaKernel<6, 2, false>, Fp8GemvMmaKernel<6, 2, true>}}};
  const Kernel kernel = kKernels[di][C - 1][v.interleave];
  const size_t smem = size_t(nw) * size_t(D * C) * 1024;
  // Above 48 KB needs the opt-in, once per kernel (for the largest block, 16 warps).
  static bool opted[3][2][2] = {};
  if (!opted[di][C - 1][v.interleave]) {
    (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               kMmaMaxWarps * D * C * 1024);
    opted[di][C - 1][v.interleave] = true;
  }
  for (int64_t row0 = 0; row0 < a.n; row0 += 8) {
    const int rows = int(a.n - row0 < 8 ? a.n - row0 : 8);
    (void)LaunchPdl(kernel, dim3(blocks), dim3(nw * 32), smem, stream, a, row0, rows, split,
                    v.prefetch);
  }
}

}  // namespace

void LaunchFp8GemvF32(const Fp8GemvArgs& a, cudaStream_t stream) {
  if (a.n == 0 || a.m == 0) return;
  const bool vec = a.k % 16 == 0 && a.ldx % 8 == 0 && a.ldw % 16 == 0 &&
                   ((reinterpret_cast<uintptr_t>(a.x) | reinterpret_cast<uintptr_t>(a.w)) & 15) == 0;
  const unsigned blocks = unsigned((a.m + kWarps - 1) / kWarps);
  for (int64_t row0 = 0; row0 < a.n; row0 += 8) {
    const int nb = int(a.n - row0 < 8 ? a.n - row0 : 8);
    switch (nb) {
#define PG_FP8_GEMV_CASE(N) \
  case N: (void)LaunchPdl(Fp8GemvKernel<N>, dim3(blocks), dim3(kWarps * 32), 0, stream, a, row0, vec); break;
      PG_FP8_GEMV_CASE(1) PG_FP8_GEMV_CASE(2) PG_FP8_GEMV_CASE(3) PG_FP8_GEMV_CASE(4)
      PG_FP8_GEMV_CASE(5) PG_FP8_GEMV_CASE(6) PG_FP8_GEMV_CASE(7) PG_FP8_GEMV_CASE(8)
#undef PG_FP8_GEMV_CASE
      default: break;
    }
  }
}

void LaunchFp8Gemv(const Fp8GemvArgs& a, cudaStream_t stream) {
  if (a.n == 0 || a.m == 0) return;
  const Fp8GemvVariant v = VariantRef();
  if (a.norm_weight || a.swiglu) LaunchFp8RingMma(a, stream, v);  // only it fuses (moe_params.h)
  else if (v.mma && v.ring != 0 && Fp8RingMmaFits(a) && (v.ring == 1 || Fp8RingMmaWants(a)))
    LaunchFp8RingMma(a, stream, v);  // gemm/fp8_ring_mma.cu
  else if (v.mma && MmaFits(a)) LaunchMma(a, stream, v);
  else LaunchFp8GemvF32(a, stream);
}

void SetFp8GemvVariant(const Fp8GemvVariant& v) { VariantRef() = v; }
Fp8GemvVariant GetFp8GemvVariant() { return VariantRef(); }

}  // namespace pg::cuda
