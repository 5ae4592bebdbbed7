// Small-batch fp8 e4m3 GEMV with dequantization scales (moe_params.h Fp8GemvArgs): the dense
// fp8 Matmul for decode batches, up to 8 activation rows a pass. Two kernels:
//
// Fp8GemvMmaKernel (the default where k % 64 == 0 and the rows are 16-byte aligned): the
//   weights are widened e4m3 -> bf16 with bit operations and multiplied on the tensor cores
//   (mma.sync m16n8k16, bf16 in, f32 accumulation), the activations taken as they are (bf16).
//   A warp owns 16 weight rows and a contiguous range of 64-column steps (1 KB of weights a
//   step); `split` warps of a block share the 16 rows and split k, their partial sums added
//   in warp order through shared memory. Why: the f32 kernel below spends ~4 instructions per
//   weight and row widening and multiplying (issue-bound at 2-4 rows, 53-70% of HBM at one);
//   here a weight costs 2 integer instructions once, whatever the row count (<= 8), and the
//   MMA does the products. Summation: per (weight row, activation row) the products of one
//   16-column MMA are summed by the tensor core in f32 (products exact: bf16 x bf16), MMAs
//   accumulate in k order within a warp's range, ranges in warp order; block scales multiply
//   each 64-column step's sum. Not bitwise the f32 kernel; both are checked against ref.
//   e4m3's NaN codes (0x7F, 0xFF) read as +-480 here (weights hold none: quantizers saturate).
//   Variants (Fp8GemvVariant, for A/B runs): steps in flight held in registers (U = 4 / 8,
//   the activations in the ring or not) or in a per-warp cp.async shared-memory ring
//   (Fp8GemvMmaSmemKernel, 4 / 6 / 8 steps); all sum in the same order (bitwise equal).
// Fp8GemvKernel (f32 FMA; fallback and reference twin of gemv_ring.cu's fp8 path): one warp
//   per output feature j, 16-byte loads (16 elements), each chunk's partial dot scaled by its
//   128-column block scale (block mode) or the row's scale at the end.
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/pdl.cuh"
#include "core/env.h"
#include "kernels/cuda/moe/moe_device.cuh"

namespace pg::cuda {
namespace {

constexpr int kWarps = 8;

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
constexpr int kStepCols = 64;     // a warp step: 16 rows x 64 e4m3 columns = 1 KB

// 4 e4m3 values (the bytes of q, first element in the low byte) as two bf16x2 words, lo =
// (e0, e1) and hi = (e2, e3), each value times 2^-120 exactly: the e4m3 exponent and mantissa
// bits land in the low bits of bf16's exponent and the top of its mantissa (bias 7 read as
// 127), so normal e4m3 become normal bf16 and subnormal e4m3 subnormal bf16, same mantissa.
// 4 integer instructions a pair (byte permute, shift, mask, merge the sign).
__device__ __forceinline__ void E4m3x4ToBf16x2(uint32_t q, uint32_t& lo, uint32_t& hi) {
  const uint32_t l = __byte_perm(q, 0u, 0x1404);  // [e1 0 e0 0]: a value in each lane's high byte
  const uint32_t h = __byte_perm(q, 0u, 0x3424);  // [e3 0 e2 0]
  lo = (l & 0x80008000u) | ((l >> 4) & 0x07F007F0u);
  hi = (h & 0x80008000u) | ((h >> 4) & 0x07F007F0u);
}

// bf16x2 times 2^120 (exact: back to the e4m3 values themselves, all normal bf16).
__device__ __forceinline__ uint32_t Rebias(uint32_t v) {
  const uint32_t k2p120 = 0x7B807B80u;  // bf16 2^120 in both lanes
  uint32_t r;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(v), "r"(k2p120), "r"(0x80008000u));
  return r;
}

// d += A (16 x 16 bf16, row-major fragment) * B (16 x 8 bf16, column fragment), f32.
__device__ __forceinline__ void MmaBf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One 64-column step of a warp: lane (g = lane / 4, q = lane % 4) holds 16 weights of row g
// (wa) and of row g + 8 (wb), columns c0 + 16q .. + 15, and the same 16 columns of activation
// row g (x0: columns +0..7, x1: +8..15; zero for g >= rows). Four MMAs, MMA i on columns
// c0 + 16q + 4i .. + 3 of every lane: the fragment's k positions (2q, 2q + 1) hold columns
// +0, +1 and (2q + 8, 2q + 9) columns +2, +3 (any k order works when A and B agree).
template <bool kRebias>
__device__ __forceinline__ void MmaStep(const uint4& wa, const uint4& wb, const uint4& x0,
                                        const uint4& x1, float (&d)[4]) {
  const uint32_t wav[4] = {wa.x, wa.y, wa.z, wa.w}, wbv[4] = {wb.x, wb.y, wb.z, wb.w};
  const uint32_t xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t a0, a2, a1, a3;
    E4m3x4ToBf16x2(wav[i], a0, a2);
    E4m3x4ToBf16x2(wbv[i], a1, a3);
    if constexpr (kRebias) a0 = Rebias(a0), a1 = Rebias(a1), a2 = Rebias(a2), a3 = Rebias(a3);
    MmaBf16(d, a0, a1, a2, a3, xv[2 * i], xv[2 * i + 1]);
  }
}

// Block (blockIdx.x) of nw = blockDim.x / 32 warps (8, or 16 with split 16): nw / split groups
// of 16 weight rows; warp w takes group w / split and k-range w % split (steps [S·r / split, S·(r + 1) / split), S = k / 64).
// Activation rows row0 .. row0 + rows - 1 (rows <= 8). Requires k % 64 == 0, ldw % 16 == 0,
// ldx % 8 == 0, w and x 16-byte aligned (LaunchFp8Gemv checks). Per lane, U steps of weights
// (and with kXRing the activations: 16 registers a step instead of 8) are in flight, a ring of
// registers refilled as each step is consumed; without kXRing a step's activations are read
// (L1 / L2 hits) as the step starts. The first U steps' weights are requested before PdlWait
// (weights only: pdl.cuh's contract).
template <int U, bool kRebias, bool kXRing>
__global__ void __launch_bounds__(kMmaMaxWarps * 32) Fp8GemvMmaKernel(Fp8GemvArgs a, int64_t row0,
                                                                      int rows, int split) {
  __shared__ float partial[kMmaMaxWarps][32][4];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  const int g = lane / 4, q = lane % 4;
  const int64_t j0 = (int64_t(blockIdx.x) * (nw / split) + warp / split) * 16;
  const int part = warp % split;
  const int64_t steps = a.k / kStepCols;
  const int64_t s0 = j0 < a.m ? steps * part / split : 0;
  const int64_t s1 = j0 < a.m ? steps * (part + 1) / split : 0;
  // Rows past m read row m - 1 (their sums are dropped).
  const int64_t ra = j0 + g < a.m ? j0 + g : a.m - 1, rb = j0 + g + 8 < a.m ? j0 + g + 8 : a.m - 1;
  const uint4* wa = reinterpret_cast<const uint4*>(a.w + ra * a.ldw) + q;  // + 4 per step
  const uint4* wb = reinterpret_cast<const uint4*>(a.w + rb * a.ldw) + q;
  const bool has_x = g < rows;
  const uint4* xr = reinterpret_cast<const uint4*>(a.x + (row0 + (has_x ? g : 0)) * a.ldx) + 2 * q;
  constexpr int UX = kXRing ? U : 1;
  uint4 w0[U], w1[U], x0[UX], x1[UX];
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (s0 + u < s1) w0[u] = __ldcs(wa + 4 * (s0 + u)), w1[u] = __ldcs(wb + 4 * (s0 + u));
  PdlWait();
  PdlTrigger();
  const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int u = 0; u < UX; ++u) {
    x0[u] = x1[u] = zero;
    if (kXRing && has_x && s0 + u < s1)
      x0[u] = __ldg(xr + 8 * (s0 + u)), x1[u] = __ldg(xr + 8 * (s0 + u) + 1);
  }
  const float* blocks = a.scale_mode == ScaleMode::kBlock && j0 < a.m
                            ? a.scale + (j0 >> 7) * a.scale_ld : nullptr;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t s = s0; s < s1; s += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t st = s + u;
      if (st < s1) {
        const int ux = kXRing ? u : 0;
        if (!kXRing && has_x) x0[0] = __ldg(xr + 8 * st), x1[0] = __ldg(xr + 8 * st + 1);
        if (blocks) {  // a 64-column step lies in one 128-column scale block
          float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          MmaStep<kRebias>(w0[u], w1[u], x0[ux], x1[ux], d);
          const float sc = __ldg(blocks + (st >> 1));
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[e] = fmaf(d[e], sc, acc[e]);
        } else {
          MmaStep<kRebias>(w0[u], w1[u], x0[ux], x1[ux], acc);
        }
        const int64_t nx = st + U;
        if (nx < s1) {
          w0[u] = __ldcs(wa + 4 * nx), w1[u] = __ldcs(wb + 4 * nx);
          if (kXRing && has_x) x0[ux] = __ldg(xr + 8 * nx), x1[ux] = __ldg(xr + 8 * nx + 1);
        }
      }
    }
  }
  if (split > 1) {
#pragma unroll
    for (int e = 0; e < 4; ++e) partial[warp][lane][e] = acc[e];
    __syncthreads();
    if (part != 0) return;
    for (int p = 1; p < split; ++p)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[e] += partial[warp + p][lane][e];
  }
  if (j0 >= a.m) return;
  // acc[e]: weight row j0 + g + 8 * (e / 2), activation row 2q + e % 2.
  const float unbias = kRebias ? 1.0f : 0x1p120f;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int64_t j = j0 + g + 8 * (e / 2);
    const int r = 2 * q + e % 2;
    if (j >= a.m || r >= rows) continue;
    float v = acc[e] * unbias * moe::ScaleOfRow(a.scale, a.scale_mode, a.scale_ld, j).row;
    if (a.bias) v += a.bias[j];
    bf16* o = a.out + (row0 + r) * a.ldo + j;
    if (a.accumulate) v += __bfloat162float(*o);
    *o = __float2bfloat16_rn(v);
  }
}

// ---- the same MMA walk with the weights staged through shared memory -----------------------
// Each lane copies its own two 16-byte pieces of a step (rows g and g + 8) into its warp's
// ring of D steps in shared memory (cp.async.cg: L2 only, no registers held), waits for the
// oldest step's group and reads back exactly what it copied, so no barrier is needed between
// lanes. Bytes in flight: D KB a warp, without the register cost of the register ring (a
// block of nw warps holds nw·D KB of shared memory; a few blocks an SM keep ~190 KB in flight,
// which the TMA-ring measurements found necessary on the H200). The first D steps
// are requested before PdlWait (weights only). Same summation order as Fp8GemvMmaKernel.
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

template <int D, bool kRebias>
__global__ void __launch_bounds__(kMmaMaxWarps * 32) Fp8GemvMmaSmemKernel(Fp8GemvArgs a, int64_t row0,
                                                                          int rows, int split) {
  extern __shared__ uint4 ring[];  // [nw][D][2 rows][32 lanes]; after the walk, [nw][32] float4
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  const int g = lane / 4, q = lane % 4;
  const int64_t j0 = (int64_t(blockIdx.x) * (nw / split) + warp / split) * 16;
  const int part = warp % split;
  const int64_t steps = a.k / kStepCols;
  const int64_t s0 = j0 < a.m ? steps * part / split : 0;
  const int64_t s1 = j0 < a.m ? steps * (part + 1) / split : 0;
  const int64_t ra = j0 + g < a.m ? j0 + g : a.m - 1, rb = j0 + g + 8 < a.m ? j0 + g + 8 : a.m - 1;
  const uint4* wa = reinterpret_cast<const uint4*>(a.w + ra * a.ldw) + q;
  const uint4* wb = reinterpret_cast<const uint4*>(a.w + rb * a.ldw) + q;
  const bool has_x = g < rows;
  const uint4* xr = reinterpret_cast<const uint4*>(a.x + (row0 + (has_x ? g : 0)) * a.ldx) + 2 * q;
  uint4* mine = ring + warp * D * 64 + lane;  // step slot d: mine[64 d] (row g), mine[64 d + 32]
#pragma unroll
  for (int d = 0; d < D; ++d) {  // one commit group per slot, empty past s1
    if (s0 + d < s1) CpAsync16(mine + 64 * d, wa + 4 * (s0 + d)), CpAsync16(mine + 64 * d + 32, wb + 4 * (s0 + d));
    CpAsyncCommit();
  }
  PdlWait();
  PdlTrigger();
  const float* blocks = a.scale_mode == ScaleMode::kBlock && j0 < a.m
                            ? a.scale + (j0 >> 7) * a.scale_ld : nullptr;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t s = s0; s < s1; s += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int64_t st = s + d;
      if (st < s1) {
        uint4 x0 = zero, x1 = zero;
        if (has_x) x0 = __ldg(xr + 8 * st), x1 = __ldg(xr + 8 * st + 1);
        CpAsyncWait<D - 1>();  // the group of step st (the oldest of D outstanding)
        const uint4 w0 = mine[64 * d], w1 = mine[64 * d + 32];
        const int64_t nx = st + D;
        if (nx < s1) CpAsync16(mine + 64 * d, wa + 4 * nx), CpAsync16(mine + 64 * d + 32, wb + 4 * nx);
        CpAsyncCommit();
        if (blocks) {
          float dd[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          MmaStep<kRebias>(w0, w1, x0, x1, dd);
          const float sc = __ldg(blocks + (st >> 1));
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[e] = fmaf(dd[e], sc, acc[e]);
        } else {
          MmaStep<kRebias>(w0, w1, x0, x1, acc);
        }
      }
    }
  }
  CpAsyncWait<0>();
  if (split > 1) {  // partial sums in each warp's own (drained) ring slot 0
    float4* partial = reinterpret_cast<float4*>(ring);
    partial[warp * D * 64 + lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    __syncthreads();
    if (part != 0) return;
    for (int p = 1; p < split; ++p) {
      const float4 o = partial[(warp + p) * D * 64 + lane];
      acc[0] += o.x, acc[1] += o.y, acc[2] += o.z, acc[3] += o.w;
    }
  }
  if (j0 >= a.m) return;
  const float unbias = kRebias ? 1.0f : 0x1p120f;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int64_t j = j0 + g + 8 * (e / 2);
    const int r = 2 * q + e % 2;
    if (j >= a.m || r >= rows) continue;
    float v = acc[e] * unbias * moe::ScaleOfRow(a.scale, a.scale_mode, a.scale_ld, j).row;
    if (a.bias) v += a.bias[j];
    bf16* o = a.out + (row0 + r) * a.ldo + j;
    if (a.accumulate) v += __bfloat162float(*o);
    *o = __float2bfloat16_rn(v);
  }
}

bool MmaFits(const Fp8GemvArgs& a) {
  return a.k % kStepCols == 0 && a.ldw % 16 == 0 && a.ldx % 8 == 0 &&
         ((reinterpret_cast<uintptr_t>(a.x) | reinterpret_cast<uintptr_t>(a.w)) & 15) == 0;
}

Fp8GemvVariant& VariantRef() {
  static Fp8GemvVariant v = [] {
    Fp8GemvVariant d;
    d.mma = EnvFlag("PEREGRINE_FP8_GEMV_MMA", true);
    d.unroll = EnvInt("PEREGRINE_FP8_GEMV_UNROLL", 4) >= 8 ? 8 : 4;
    d.rebias = EnvFlag("PEREGRINE_FP8_GEMV_REBIAS", false);
    d.x_ring = EnvFlag("PEREGRINE_FP8_GEMV_XRING", true);
    const int depth = EnvInt("PEREGRINE_FP8_GEMV_SMEM", 0);
    d.smem_depth = depth >= 8 ? 8 : depth >= 6 ? 6 : depth >= 4 ? 4 : 0;
    d.warps_per_sm = EnvInt("PEREGRINE_FP8_GEMV_WARPS_PER_SM", d.warps_per_sm);
    return d;
  }();
  return v;
}

void LaunchMma(const Fp8GemvArgs& a, cudaStream_t stream, const Fp8GemvVariant& v) {
  // split: warps sharing 16 rows (1, 2, 4, 8, 16), doubled while the grid has fewer than
  // v.warps_per_sm warps an SM and each warp keeps >= 4 steps (4 KB); blocks of max(8, split)
  // warps. At 24 an SM (132 SMs): Llama qkv / o 16 (4 steps a warp), gate_up 2, down 16;
  // DeepSeek-V3 q_a + kv_a 16, q_b (k = 1536) 4, o 8, gate 4, down 8.
  const int64_t steps = a.k / kStepCols, groups = (a.m + 15) / 16;
  const int64_t want = int64_t(v.warps_per_sm) * MultiprocessorCount();
  int split = 1;
  while (split < kMmaMaxWarps && groups * split < want && steps >= 8 * split) split *= 2;
  const int nw = split > 8 ? split : 8;
  const int64_t per_block = nw / split;
  const unsigned blocks = unsigned((groups + per_block - 1) / per_block);
  using Kernel = void (*)(Fp8GemvArgs, int64_t, int, int);
  static constexpr Kernel kKernels[2][2][2] = {  // [unroll 8][rebias][x_ring]
      {{Fp8GemvMmaKernel<4, false, false>, Fp8GemvMmaKernel<4, false, true>},
       {Fp8GemvMmaKernel<4, true, false>, Fp8GemvMmaKernel<4, true, true>}},
      {{Fp8GemvMmaKernel<8, false, false>, Fp8GemvMmaKernel<8, false, true>},
       {Fp8GemvMmaKernel<8, true, false>, Fp8GemvMmaKernel<8, true, true>}}};
  Kernel kernel = kKernels[v.unroll == 8][v.rebias][v.x_ring];
  size_t smem = 0;
  if (v.smem_depth > 0) {
    static constexpr Kernel kSmem[3][2] = {  // [depth 4 / 6 / 8][rebias]
        {Fp8GemvMmaSmemKernel<4, false>, Fp8GemvMmaSmemKernel<4, true>},
        {Fp8GemvMmaSmemKernel<6, false>, Fp8GemvMmaSmemKernel<6, true>},
        {Fp8GemvMmaSmemKernel<8, false>, Fp8GemvMmaSmemKernel<8, true>}};
    const int di = v.smem_depth >= 8 ? 2 : v.smem_depth >= 6 ? 1 : 0;
    kernel = kSmem[di][v.rebias];
    smem = size_t(nw) * size_t(4 + 2 * di) * 1024;
    // Above 48 KB needs the opt-in, once per kernel (for the largest block, 16 warps).
    static bool opted[3][2] = {};
    if (!opted[di][v.rebias]) {
      (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 kMmaMaxWarps * (4 + 2 * di) * 1024);
      opted[di][v.rebias] = true;
    }
  }
  for (int64_t row0 = 0; row0 < a.n; row0 += 8) {
    const int rows = int(a.n - row0 < 8 ? a.n - row0 : 8);
    (void)LaunchPdl(kernel, dim3(blocks), dim3(nw * 32), smem, stream, a, row0, rows, split);
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
  if (v.mma && MmaFits(a)) LaunchMma(a, stream, v);
  else LaunchFp8GemvF32(a, stream);
}

void SetFp8GemvVariant(const Fp8GemvVariant& v) { VariantRef() = v; }
Fp8GemvVariant GetFp8GemvVariant() { return VariantRef(); }

}  // namespace pg::cuda
