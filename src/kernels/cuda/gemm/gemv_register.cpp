// CUDA backends of ops_fused.h FusedMatmul: "cuda" runs the fused GEMV (gemv.cu: RMSNorm
// prologue, SwiGLU epilogue) for bf16 weights at n <= 4 rows; "cuda_fp8_ring" the ring
// tensor-core GEMV (fp8_ring_mma.cu, the same fused options) for fp8 e4m3 weights (per-tensor,
// per-row or 128x128 block scales) at n <= 8 rows where Fp8GemvVariant::ring selects it;
// "cuda_composed" runs the composition (RmsNorm, Matmul, SwiGlu on their CUDA backends) for
// everything else (larger batches, shapes the kernels' staging does not take).
#include "core/env.h"
#include "core/log.h"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/device_params.h"
#include "kernels/cuda/gemm/fp8_ring_mma.h"
#include "kernels/cuda/moe/moe_params.h"
#include "kernels/ops_fused.h"
#include "kernels/registry.h"

namespace pg::ops {
namespace {

using cuda::bf16;

bool DevBf16(const TensorView& t) { return t.device == Device::kCuda && t.dtype == DType::kBF16; }

cuda::WeightType NormType(DType t) {
  return t == DType::kBF16 ? cuda::WeightType::kBF16
                           : (t == DType::kF16 ? cuda::WeightType::kF16 : cuda::WeightType::kF32);
}

// The fused kernel's arguments (m: outputs per row, half of w's rows with swiglu).
cuda::GemvArgs ArgsOf(const FusedMatmulParams& p) {
  cuda::GemvArgs a{};
  a.x = static_cast<const bf16*>(p.x.data);
  a.w = static_cast<const bf16*>(p.w.data);
  a.out = static_cast<bf16*>(p.out.data);
  a.bias = p.bias.data ? p.bias.as<float>() : nullptr;
  a.n = p.x.dim(0);
  a.k = p.x.dim(1);
  a.m = p.swiglu ? p.w.dim(0) / 2 : p.w.dim(0);
  a.ldx = p.x.strides[0];
  a.ldw = p.w.strides[0];
  a.ldo = p.out.strides[0];
  a.accumulate = p.accumulate;
  a.w_constant = true;  // ops_fused.h: w is a weight
  a.norm_weight = p.norm_weight.data;
  a.norm_type = NormType(p.norm_weight.dtype);
  a.norm_eps = p.eps;
  a.swiglu = p.swiglu;
  return a;
}

bool Supports(const FusedMatmulParams& p) {
  if (!(DevBf16(p.x) && DevBf16(p.w) && DevBf16(p.out) && !p.w_scale.data)) return false;
  if (p.norm_weight.data && p.norm_weight.device != Device::kCuda) return false;
  return cuda::GemvFusedSupports(ArgsOf(p));
}

void RunFused(const FusedMatmulParams& p) {
  cuda::LaunchGemv(ArgsOf(p), cuda::CurrentStream());
  PG_CUDA_CHECK_LAUNCH();
}

void RunComposed(const FusedMatmulParams& p) { RunFusedMatmulComposed(p, /*reference=*/false); }

// fp8 weights: the ring kernel's arguments (w_scale [1] per tensor, [rows] per row, 2-D
// [ceil(rows / 128), ceil(k / 128)] blocks; m: outputs per row, half of w's rows with swiglu).
constexpr int64_t kFp8FusedMaxRows = 8;  // one pass of the kernel (its MMA's 8 columns)
cuda::Fp8GemvArgs Fp8ArgsOf(const FusedMatmulParams& p) {
  cuda::Fp8GemvArgs a{};
  a.x = static_cast<const bf16*>(p.x.data);
  a.w = static_cast<const uint8_t*>(p.w.data);
  a.scale = p.w_scale.as<float>();
  a.scale_mode = p.w_scale.ndim == 2 ? cuda::ScaleMode::kBlock
                 : p.w_scale.dim(0) == 1 && p.w.dim(0) != 1 ? cuda::ScaleMode::kTensor
                                                            : cuda::ScaleMode::kChannel;
  a.scale_ld = p.w_scale.ndim == 2 ? int(p.w_scale.dim(1)) : 0;
  a.out = static_cast<bf16*>(p.out.data);
  a.bias = p.bias.data ? p.bias.as<float>() : nullptr;
  a.n = p.x.dim(0), a.k = p.x.dim(1), a.m = p.swiglu ? p.w.dim(0) / 2 : p.w.dim(0);
  a.ldx = p.x.strides[0], a.ldw = p.w.strides[0], a.ldo = p.out.strides[0];
  a.norm_weight = p.norm_weight.data;
  a.norm_type = NormType(p.norm_weight.dtype);
  a.norm_eps = p.eps;
  a.swiglu = p.swiglu;
  a.accumulate = p.accumulate;
  return a;
}

bool Fp8Supports(const FusedMatmulParams& p) {
  if (!(DevBf16(p.x) && DevBf16(p.out) && p.w.device == Device::kCuda &&
        p.w.dtype == DType::kF8E4M3 && p.w_scale.data && p.w_scale.device == Device::kCuda &&
        p.w_scale.dtype == DType::kF32 && (p.w_scale.ndim == 1 || p.w_scale.ndim == 2)))
    return false;
  if (p.norm_weight.data && p.norm_weight.device != Device::kCuda) return false;
  if (p.bias.data && p.bias.device != Device::kCuda) return false;
  if (p.x.dim(0) > kFp8FusedMaxRows) return false;
  // PEREGRINE_FP8_RING_FUSED=0: the composition (ring GEMV alone, for A/B of the fusion).
  static const bool fused = EnvFlag("PEREGRINE_FP8_RING_FUSED", true);
  if (!fused) return false;
  const cuda::Fp8GemvVariant v = cuda::GetFp8GemvVariant();
  const cuda::Fp8GemvArgs a = Fp8ArgsOf(p);
  return v.mma && v.ring != 0 && cuda::Fp8RingMmaFits(a) && (v.ring == 1 || cuda::Fp8RingMmaWants(a));
}

void RunFusedFp8(const FusedMatmulParams& p) {
  cuda::LaunchFp8RingMma(Fp8ArgsOf(p), cuda::CurrentStream(), cuda::GetFp8GemvVariant());
  PG_CUDA_CHECK_LAUNCH();
}

}  // namespace

void RegisterCudaFusedKernels(Registry& r) {
  if (cuda::DeviceCount() == 0) return;  // RegisterCudaKernels warns once
  r.Register(KernelImpl<FusedMatmulParams>{"cuda", Device::kCuda, kPriorityCuda, &Supports, &RunFused});
  r.Register(KernelImpl<FusedMatmulParams>{"cuda_fp8_ring", Device::kCuda, kPriorityCuda, &Fp8Supports,
                                           &RunFusedFp8});
  r.Register(KernelImpl<FusedMatmulParams>{"cuda_composed", Device::kCuda, kPriorityCuda - 1,
                                           {}, &RunComposed});
}

}  // namespace pg::ops
