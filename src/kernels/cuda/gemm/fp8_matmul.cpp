// The fp8 e4m3 Matmul with per-tensor / per-output-channel scales (MatmulParams::w_scale of
// shape [1] or [m]); 128x128 block scales are cuda/moe's "cuda_fp8_block".
//   cuda_fp8_gemv: n <= kFp8GemvMaxRows, or n <= kFp8GemvMmaRows where cuda/moe's tensor-core
//                  GEMV takes the shape (k % 64 == 0) — the weight streamed once, bf16
//                  activations as they are, f32 accumulation (cuda/moe/fp8_gemv.cu).
//   cuda_fp8_lt:   above — activations quantized to e4m3 with one dynamic
//                  scale (fp8_quant.cu), then cuBLASLt's fp8 GEMM with the scales as device
//                  pointers; when cuBLASLt has no algorithm for the shape: GEMV passes up to
//                  kFp8GemvPassRows rows, cuda/moe's tiled GEMM above (bf16 activations x fp8
//                  weights, k and m multiples of 64), else the GEMV.
// Both are graph-capturable once warmed up (the scratch has grown, the plan is cached).
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/gemm/fp8_matmul.h"
#include "kernels/cuda/gemm/fp8_quant.h"
#include "kernels/cuda/gemm/gemv_ring.h"
#include "kernels/cuda/gemm/matmul_lt.h"
#include "kernels/cuda/moe/moe_params.h"
#include "kernels/registry.h"

namespace pg::ops {
namespace {

constexpr int64_t kFp8GemvMaxRows = 4;    // cuda_fp8_gemv's rows; cuda_fp8_lt above
// The tensor-core GEMV costs the same at 1-8 rows (one pass, the MMA's 8 columns), so it
// keeps up to 8 (cuBLASLt at 8 rows quantizes the activations and took 95.5 us a Llama-3.1-8B
// layer vs 69.9 for the f32 GEMV at one row: docs/PERF.md "fp8 e4m3 weights").
constexpr int64_t kFp8GemvMmaRows = 8;
constexpr int64_t kFp8GemvPassRows = 32;  // cuda_fp8_lt without cuBLASLt: GEMV passes up to here

bool On(const TensorView& t, DType d) { return t.device == Device::kCuda && t.dtype == d; }
bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
cuda::ScaleMode ModeOf(const MatmulParams& p) {
  return p.w_scale.dim(0) == 1 && p.w.dim(0) != 1 ? cuda::ScaleMode::kTensor
                                                  : cuda::ScaleMode::kChannel;
}

bool GemvRows(const MatmulParams& p) {
  const int64_t n = p.x.dim(0);
  return n <= kFp8GemvMaxRows ||
         (n <= kFp8GemvMmaRows && p.x.dim(1) % 64 == 0 && cuda::GetFp8GemvVariant().mma);
}

bool Fp8Supports(const MatmulParams& p) {
  return On(p.x, DType::kBF16) && On(p.out, DType::kBF16) && On(p.w, DType::kF8E4M3) &&
         On(p.w_scale, DType::kF32) && p.w_scale.ndim == 1 &&
         (!p.bias.data || p.bias.device == Device::kCuda);
}

}  // namespace

namespace fp8 {

void RunGemv(const MatmulParams& p) {
  cuda::Fp8GemvArgs a{};
  a.x = static_cast<const cuda::bf16*>(p.x.data);
  a.w = static_cast<const uint8_t*>(p.w.data);
  a.scale = p.w_scale.as<float>();
  a.scale_mode = ModeOf(p);
  a.scale_ld = 0;
  a.out = static_cast<cuda::bf16*>(p.out.data);
  a.bias = p.bias.data ? p.bias.as<float>() : nullptr;
  a.n = p.x.dim(0), a.k = p.x.dim(1), a.m = p.w.dim(0);
  a.ldx = p.x.strides[0], a.ldw = p.w.strides[0], a.ldo = p.out.strides[0];
  a.accumulate = p.accumulate;
  if (cuda::Fp8GemvRingTake(a)) cuda::LaunchFp8GemvRing(a, cuda::CurrentStream());  // gemv_ring.cu
  else cuda::LaunchFp8Gemv(a, cuda::CurrentStream());
  PG_CUDA_CHECK_LAUNCH();
}

bool RunTiled(const MatmulParams& p) {
  const int64_t n = p.x.dim(0), k = p.x.dim(1), m = p.w.dim(0);
  if (!(k % 64 == 0 && m % 64 == 0 && p.w.strides[0] % 16 == 0 && p.x.strides[0] % 8 == 0 &&
        p.out.strides[0] % 2 == 0 && Aligned16(p.x.data) && Aligned16(p.w.data)))
    return false;
  cuda::GroupedGemmArgs g{};
  g.a = static_cast<const cuda::bf16*>(p.x.data);
  g.lda = p.x.strides[0];
  g.a_row_div = 1;
  g.dense_b0 = p.w.data;
  g.dense_s0 = p.w_scale.as<float>();
  g.layout.fp8 = true;
  g.layout.scale_mode = ModeOf(p);
  g.layout.aligned16 = true;
  g.ld_b = p.w.strides[0];
  g.dense_rows = n;
  g.out = p.out.data;
  g.out_f32 = false;
  g.ldo = p.out.strides[0];
  g.bias = p.bias.data ? p.bias.as<float>() : nullptr;
  g.accumulate = p.accumulate;
  g.K = int(k);
  g.N = int(m);
  g.mode = cuda::GemmMode::kPlain;
  g.tile_rows = n >= 512 ? 128 : n >= 64 ? 64 : 32;
  cuda::LaunchGroupedGemm(g, cuda::CurrentStream());
  PG_CUDA_CHECK_LAUNCH();
  return true;
}

bool RunLtOnly(const MatmulParams& p) {
  cudaStream_t stream = cuda::CurrentStream();
  const int64_t n = p.x.dim(0), k = p.x.dim(1), m = p.w.dim(0);
  const int64_t ldq = (k + 15) / 16 * 16;  // 16-byte rows for cuBLASLt
  // Scratch: amax at 0, the scale at 16 (cuBLASLt refused, at launch, a scale pointer that
  // was only 4-byte aligned), the quantized rows at 256.
  char* s = static_cast<char*>(
      cuda::Scratch(cuda::ScratchSlot::kFp8Act, 256 + size_t(n * ldq)));
  cuda::Fp8QuantArgs q{static_cast<const cuda::bf16*>(p.x.data), reinterpret_cast<uint8_t*>(s + 256),
                       reinterpret_cast<float*>(s), reinterpret_cast<float*>(s + 16), n, k,
                       p.x.strides[0], ldq};
  cuda::LtFp8Args g{};
  g.x = q.xq;
  g.w = static_cast<const uint8_t*>(p.w.data);
  g.out = static_cast<cuda::bf16*>(p.out.data);
  g.n = n, g.k = k, g.m = m, g.ldx = ldq, g.ldw = p.w.strides[0], g.ldo = p.out.strides[0];
  g.accumulate = p.accumulate;
  g.x_scale = q.scale;
  g.w_scale = p.w_scale.as<float>();
  g.w_per_channel = ModeOf(p) == cuda::ScaleMode::kChannel;
  if (!cuda::LtFp8Available(g)) return false;
  cuda::LaunchFp8Quant(q, stream);
  PG_CUDA_CHECK_LAUNCH();
  if (!cuda::LtMatmulFp8(g, stream)) return false;  // refused at launch: quantized for nothing
  if (p.bias.data) {
    cuda::LaunchBiasAdd({static_cast<cuda::bf16*>(p.out.data), p.bias.as<float>(),
                         p.out.strides[0], n, m},
                        stream);
    PG_CUDA_CHECK_LAUNCH();
  }
  return true;
}

void RunGemm(const MatmulParams& p) {
  if (RunLtOnly(p)) return;
  // Without cuBLASLt: the GEMV (one weight pass per 8 rows) beats the tiled GEMM up to 32
  // rows on the H200 (gpu-decode, Llama-3.1-8B fp8: batch 8 and 32 took 19.3 / 18.7 ms per
  // step through the tiled GEMM against 3.5 ms at batch 1 through the GEMV).
  if (p.x.dim(0) > kFp8GemvPassRows && RunTiled(p)) return;
  RunGemv(p);
}

}  // namespace fp8

void RegisterCudaFp8MatmulKernels(Registry& r) {
  r.Register(KernelImpl<MatmulParams>{
      "cuda_fp8_gemv", Device::kCuda, kPriorityCuda,
      [](const MatmulParams& p) { return Fp8Supports(p) && GemvRows(p); },
      &fp8::RunGemv});
  r.Register(KernelImpl<MatmulParams>{
      "cuda_fp8_lt", Device::kCuda, kPriorityCuda,
      [](const MatmulParams& p) { return Fp8Supports(p) && !GemvRows(p); },
      &fp8::RunGemm});
}

}  // namespace pg::ops
