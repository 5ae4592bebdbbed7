// Small-batch fp8 e4m3 GEMV with dequantization scales (moe_params.h Fp8GemvArgs): the dense
// fp8 Matmul for decode batches. One warp per output feature j, up to 8 rows per pass; the
// weight row is streamed once per pass in 16-byte loads (16 elements), each chunk's partial
// dot scaled by its 128-column block scale (block mode) or the row's scale at the end.
#include "kernels/cuda/common/pdl.cuh"
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

}  // namespace

void LaunchFp8Gemv(const Fp8GemvArgs& a, cudaStream_t stream) {
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

}  // namespace pg::cuda
