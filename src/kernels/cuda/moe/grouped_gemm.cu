// Grouped GEMM over experts (moe_params.h GroupedGemmArgs) with mma.sync m16n8k16 bf16
// tensor cores, f32 accumulation. Also the dense fp8 block-scaled Matmul (tiles == null).
//
// Block: 128 threads (4 warps), tile BM x 64 outputs, K in steps of 64 through a cp.async
// ring of 3-4 stages (A rows gathered through a_rows; B bf16, or fp8 bytes widened exactly to
// bf16 in registers as the MMA fragments are read; fp8 scales multiply the f32 accumulators,
// block scales once per K step). bf16 tiles are [rows][64], 16-byte chunks XOR-swizzled by (row & 7) so
// ldmatrix reads are conflict free.
// BM in {16, 32, 64, 128}: small tiles for sparsely hit experts (each expert's weight panel
// is read once per tile of its rows; fewer wasted rows), large ones for prefill.
#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/moe/moe_device.cuh"

namespace pg::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kBN = 64, kBK = 64;

__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  const unsigned s = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void LdMatrixX4(const bf16* p, unsigned& r0, unsigned& r1, unsigned& r2,
                                           unsigned& r3) {
  const unsigned s = unsigned(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(s));
}

__device__ __forceinline__ void Mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Element offset of 16-byte chunk `ch` (0..7) of row `row` in a swizzled [rows][64] tile.
__device__ __forceinline__ int Swz(int row, int ch) { return row * kBK + ((ch ^ (row & 7)) << 3); }

// Byte offset of 16-byte chunk `ch` (0..3) of row `row` in an fp8 [rows][64] tile: chunks
// XOR-swizzled by (row >> 1) & 3, so the B-fragment reads of a warp (8 rows, one chunk) hit
// distinct banks.
__device__ __forceinline__ int Fp8Chunk(int row, int ch) { return row * kBK + ((ch ^ ((row >> 1) & 3)) << 4); }

// Two e4m3 values -> bf16x2 (exact: every e4m3 value is a bf16 value).
__device__ __forceinline__ unsigned Fp8x2ToBf16x2(uint16_t v) {
  const float2 f = moe::Fp8x2ToFloat2(v);
  const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
  return *reinterpret_cast<const unsigned*>(&b);
}

template <int BM, bool kFp8, bool kGateUp>
struct Cfg {
  static constexpr int kNB = kGateUp ? 2 : 1;          // B matrices (gate, up)
  static constexpr int WM = BM == 16 ? 1 : 2, WN = 4 / WM;
  static constexpr int TM = BM / WM, TN = kBN / WN;     // warp tile
  static constexpr int MF = TM / 16, NF = TN / 8;       // mma fragments per warp
  static constexpr int kStages = BM == 128 ? 3 : 4;     // cp.async ring depth
  // A ring slot: [BM][64] bf16 (swizzled). B ring slot per matrix: bf16 [64][64] (swizzled),
  // or fp8 [64][64] bytes (16-byte chunks swizzled by Fp8Chunk), widened in registers.
  static constexpr int kABytes = BM * kBK * 2;
  static constexpr int kBBytes = kBN * kBK * (kFp8 ? 1 : 2);
  static constexpr int kSlotBytes = kABytes + kNB * kBBytes;
  static constexpr int kSmemBytes = kStages * kSlotBytes;
  static constexpr int kAChunks = BM * 8 / kThreads;    // A 16-byte chunks per thread (>= 1)
  static constexpr int kBChunks = kFp8 ? kBN * 4 / kThreads : kBN * 8 / kThreads;
};

template <int BM, bool kFp8, bool kGateUp>
__global__ void __launch_bounds__(kThreads) GroupedGemmKernel(GroupedGemmArgs a) {
  using C = Cfg<BM, kFp8, kGateUp>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  PdlWait();  // PDL (pdl.cuh): the tile table and A come from upstream kernels
  PdlTrigger();
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp / C::WN, wn = warp % C::WN;

  // ---- the tile ----
  int64_t p0;
  int rows;
  const void* b[2] = {nullptr, nullptr};
  const float* bs[2] = {nullptr, nullptr};
  if (a.tiles) {
    if (int(blockIdx.x) >= *a.num_tiles) return;
    const int32_t* t = a.tiles + 3 * int64_t(blockIdx.x);
    const MoeExpertPtrs& E = a.experts[t[0]];
    p0 = t[1];
    rows = t[2];
    if (a.which == 2) b[0] = E.down, bs[0] = E.down_scale;
    else if (a.which == 1) b[0] = E.up, bs[0] = E.up_scale;
    else b[0] = E.gate, bs[0] = E.gate_scale, b[1] = E.up, bs[1] = E.up_scale;
  } else {
    p0 = int64_t(blockIdx.x) * BM;
    if (p0 >= a.dense_rows) return;
    rows = int(a.dense_rows - p0 < BM ? a.dense_rows - p0 : BM);
    b[0] = a.dense_b0;
    bs[0] = a.dense_s0;
  }
  const int n0 = blockIdx.y * kBN;
  const int64_t ld_b[2] = {a.ld_b, a.ld_b1};

  // ---- per-thread load assignments ----
  const bf16* a_src[C::kAChunks];
  int a_dst[C::kAChunks];
#pragma unroll
  for (int i = 0; i < C::kAChunks; ++i) {
    const int id = tid + i * kThreads, r = id / 8, ch = id % 8;
    const int64_t p = p0 + min(r, rows - 1);  // rows past the tile repeat its last row
    const int64_t arow = a.a_rows ? a.a_rows[p] / a.a_row_div : p;
    a_src[i] = a.a + arow * a.lda + ch * 8;
    a_dst[i] = Swz(r, ch);
  }
  // B: bf16 -> 8 chunks of 8 elements per row; fp8 -> 4 chunks of 16 elements per row.
  constexpr int kBPerRow = kFp8 ? 4 : 8;
  constexpr int kElemBytes = kFp8 ? 1 : 2;

  auto slot = [&](int i) { return smem_raw + (i % C::kStages) * C::kSlotBytes; };
  // Step `kt`'s copies (A, B) into ring slot kt % kStages.
  auto load_step = [&](int kt) {
    const int k0 = kt * kBK;
    unsigned char* sl = slot(kt);
    bf16* sa = reinterpret_cast<bf16*>(sl);
#pragma unroll
    for (int i = 0; i < C::kAChunks; ++i) CpAsync16(sa + a_dst[i], a_src[i] + k0);
#pragma unroll
    for (int m = 0; m < C::kNB; ++m) {
      unsigned char* sb = sl + C::kABytes + m * C::kBBytes;
#pragma unroll
      for (int i = 0; i < C::kBChunks; ++i) {
        const int id = tid + i * kThreads, r = id / kBPerRow, ch = id % kBPerRow;
        if constexpr (kFp8) {
          const uint8_t* src = static_cast<const uint8_t*>(b[m]) + int64_t(n0 + r) * ld_b[m] + k0 + ch * 16;
          CpAsync16(sb + Fp8Chunk(r, ch), src);
        } else {
          const bf16* src = static_cast<const bf16*>(b[m]) + int64_t(n0 + r) * ld_b[m] + k0 + ch * 8;
          CpAsync16(reinterpret_cast<bf16*>(sb) + Swz(r, ch), src);
        }
      }
    }
  };
  (void)kElemBytes;

  float acc[C::kNB][C::MF][C::NF][4];
#pragma unroll
  for (int m = 0; m < C::kNB; ++m)
#pragma unroll
    for (int i = 0; i < C::MF; ++i)
#pragma unroll
      for (int j = 0; j < C::NF; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[m][i][j][q] = 0.0f;

  const int KT = a.K / kBK;
  // Prologue: steps 0 .. kStages-2 in flight (one commit group per step, empty past KT).
#pragma unroll
  for (int st = 0; st < C::kStages - 1; ++st) {
    if (st < KT) load_step(st);
    CpAsyncCommit();
  }

  // fp8 block scales (one per matrix per 64-wide K step: the 64 tile rows lie in one
  // 128-row block, the step in one 128-column block). The accumulators are kept in units of
  // the current step's scale: when it changes, they are multiplied by old / new; the
  // epilogue multiplies by the last. A zero scale's step contributes nothing and is skipped.
  // Tensor / channel scales are applied in the epilogue. B operands are exact fp8 values.
  const bool block_scaled = kFp8 && a.layout.scale_mode == ScaleMode::kBlock;
  float cur_scale[C::kNB];
#pragma unroll
  for (int m = 0; m < C::kNB; ++m) cur_scale[m] = 1.0f;
  const int64_t scale_row = int64_t(n0 >> 7) * a.scale_ld;

  for (int kt = 0; kt < KT; ++kt) {
    float step_scale[C::kNB];
    bool skip_step[C::kNB];
#pragma unroll
    for (int m = 0; m < C::kNB; ++m) {
      step_scale[m] = block_scaled ? __ldg(bs[m] + scale_row + ((kt * kBK) >> 7)) : 1.0f;
      skip_step[m] = step_scale[m] == 0.0f;
    }
    // Committed groups so far: kStages - 1 + kt; step kt's is complete when at most
    // kStages - 2 remain pending. The barrier then also frees slot (kt - 1) % kStages (every
    // warp finished step kt - 1) for step kt + kStages - 1.
    CpAsyncWait<C::kStages - 2>();
    __syncthreads();
    if (kt + C::kStages - 1 < KT) load_step(kt + C::kStages - 1);
    CpAsyncCommit();
    const bf16* As = reinterpret_cast<const bf16*>(slot(kt));
    const unsigned char* Bbase = slot(kt) + C::kABytes;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      unsigned af[C::MF][4];
#pragma unroll
      for (int i = 0; i < C::MF; ++i) {
        const int r = wm * C::TM + i * 16 + (lane % 16);
        LdMatrixX4(As + Swz(r, kk * 2 + lane / 16), af[i][0], af[i][1], af[i][2], af[i][3]);
      }
#pragma unroll
      for (int m = 0; m < C::kNB; ++m) {
        if (skip_step[m]) continue;
        if (block_scaled && kk == 0 && step_scale[m] != cur_scale[m]) {
          const float ratio = kt == 0 ? 1.0f : cur_scale[m] / step_scale[m];
#pragma unroll
          for (int i = 0; i < C::MF; ++i)
#pragma unroll
            for (int j = 0; j < C::NF; ++j)
#pragma unroll
              for (int q = 0; q < 4; ++q) acc[m][i][j][q] *= ratio;
          cur_scale[m] = step_scale[m];
        }
        unsigned bfr[C::NF][2];
        if constexpr (kFp8) {
          // Fragment of n8 block j: column n = lane / 4, k pairs 2t and 2t + 8 (t = lane % 4)
          // of this 16-wide k slice, read as fp8 pairs and widened in registers.
          const unsigned char* Bs = Bbase + m * C::kBBytes;
#pragma unroll
          for (int j = 0; j < C::NF; ++j) {
            const int n = wn * C::TN + j * 8 + lane / 4;
            const unsigned char* p = Bs + Fp8Chunk(n, kk) + 2 * (lane % 4);
            bfr[j][0] = Fp8x2ToBf16x2(*reinterpret_cast<const uint16_t*>(p));
            bfr[j][1] = Fp8x2ToBf16x2(*reinterpret_cast<const uint16_t*>(p + 8));
          }
        } else {
          const bf16* Bs = reinterpret_cast<const bf16*>(Bbase + m * C::kBBytes);
#pragma unroll
          for (int j2 = 0; j2 < C::NF / 2; ++j2) {
            const int n = wn * C::TN + j2 * 16 + (lane % 8) + (lane / 16) * 8;
            LdMatrixX4(Bs + Swz(n, kk * 2 + (lane / 8) % 2), bfr[2 * j2][0], bfr[2 * j2][1],
                       bfr[2 * j2 + 1][0], bfr[2 * j2 + 1][1]);
          }
        }
#pragma unroll
        for (int i = 0; i < C::MF; ++i)
#pragma unroll
          for (int j = 0; j < C::NF; ++j) Mma(acc[m][i][j], af[i], bfr[j][0], bfr[j][1]);
      }
    }
  }
  CpAsyncWait<0>();  // no copies outstanding at exit (empty groups only, but be explicit)

  // ---- epilogue ----
  // Output scale of each (matrix, column fragment, column pair): the last block scale, the
  // tensor scale or the channel scales of the columns; 1 for bf16.
  float out_scale[C::kNB][C::NF][2];
#pragma unroll
  for (int m = 0; m < C::kNB; ++m)
#pragma unroll
    for (int j = 0; j < C::NF; ++j)
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int n = n0 + wn * C::TN + j * 8 + (lane % 4) * 2 + q;
        float sc = 1.0f;
        if constexpr (kFp8) {
          if (a.layout.scale_mode == ScaleMode::kBlock) sc = cur_scale[m];
          else if (a.layout.scale_mode == ScaleMode::kTensor) sc = __ldg(bs[m]);
          else if (a.layout.scale_mode == ScaleMode::kChannel) sc = __ldg(bs[m] + n);
        }
        out_scale[m][j][q] = sc;
      }
#pragma unroll
  for (int i = 0; i < C::MF; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wm * C::TM + i * 16 + lane / 4 + h * 8;
      if (r >= rows) continue;
      const int64_t p = p0 + r;
#pragma unroll
      for (int j = 0; j < C::NF; ++j) {
        const int n = n0 + wn * C::TN + j * 8 + (lane % 4) * 2;
        float v0 = acc[0][i][j][2 * h] * out_scale[0][j][0];
        float v1 = acc[0][i][j][2 * h + 1] * out_scale[0][j][1];
        if constexpr (kGateUp) {
          v0 = moe::Silu(v0) * (acc[C::kNB - 1][i][j][2 * h] * out_scale[C::kNB - 1][j][0]);
          v1 = moe::Silu(v1) * (acc[C::kNB - 1][i][j][2 * h + 1] * out_scale[C::kNB - 1][j][1]);
        } else {
          if (a.bias) v0 += a.bias[n], v1 += a.bias[n + 1];
        }
        if (a.out_f32) {
          float2* o = reinterpret_cast<float2*>(static_cast<float*>(a.out) + p * a.ldo + n);
          if (a.accumulate) {
            const float2 old = *o;
            v0 += old.x, v1 += old.y;
          }
          *o = make_float2(v0, v1);
        } else {
          __nv_bfloat162* o =
              reinterpret_cast<__nv_bfloat162*>(static_cast<bf16*>(a.out) + p * a.ldo + n);
          if (a.accumulate) {
            const float2 old = __bfloat1622float2(*o);
            v0 += old.x, v1 += old.y;
          }
          *o = __floats2bfloat162_rn(v0, v1);
        }
      }
    }
}

template <int BM, bool kFp8, bool kGateUp>
void LaunchTyped(const GroupedGemmArgs& a, cudaStream_t stream) {
  using C = Cfg<BM, kFp8, kGateUp>;
  static_assert(C::kAChunks >= 1 && C::kBChunks >= 1 && C::NF % 2 == 0, "tile shape");
  auto kernel = GroupedGemmKernel<BM, kFp8, kGateUp>;
  static bool attr = [&] {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
    return true;
  }();
  (void)attr;
  const int64_t tiles = a.tiles ? a.max_tiles : (a.dense_rows + BM - 1) / BM;
  if (tiles <= 0) return;
  const dim3 grid(unsigned(tiles), unsigned(a.N / kBN));
  (void)LaunchPdl(kernel, grid, dim3(kThreads), C::kSmemBytes, stream, a);
}

template <bool kFp8, bool kGateUp>
void LaunchBM(const GroupedGemmArgs& a, cudaStream_t stream) {
  switch (a.tile_rows) {
    case 16: LaunchTyped<16, kFp8, kGateUp>(a, stream); break;
    case 32: LaunchTyped<32, kFp8, kGateUp>(a, stream); break;
    case 64: LaunchTyped<64, kFp8, kGateUp>(a, stream); break;
    default: LaunchTyped<128, kFp8, kGateUp>(a, stream); break;
  }
}

}  // namespace

void LaunchGroupedGemm(const GroupedGemmArgs& a, cudaStream_t stream) {
  const bool gu = a.mode == GemmMode::kGateUp;
  if (a.layout.fp8) {
    if (gu) LaunchBM<true, true>(a, stream);
    else LaunchBM<true, false>(a, stream);
  } else {
    if (gu) LaunchBM<false, true>(a, stream);
    else LaunchBM<false, false>(a, stream);
  }
}

}  // namespace pg::cuda
