// CUDA backends of ops_fused.h FusedMatmul: "cuda" runs the fused GEMV (gemv.cu: RMSNorm
// prologue, SwiGLU epilogue) for bf16 weights at n <= 4 rows; "cuda_composed" runs the
// composition (RmsNorm, Matmul, SwiGlu on their CUDA backends) for everything else (larger
// batches, fp8 weights, shapes the kernel's staging does not take).
#include "core/log.h"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/device_params.h"
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
  a.accumulate = false;
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

}  // namespace

void RegisterCudaFusedKernels(Registry& r) {
  if (cuda::DeviceCount() == 0) return;  // RegisterCudaKernels warns once
  r.Register(KernelImpl<FusedMatmulParams>{"cuda", Device::kCuda, kPriorityCuda, &Supports, &RunFused});
  r.Register(KernelImpl<FusedMatmulParams>{"cuda_composed", Device::kCuda, kPriorityCuda - 1,
                                           {}, &RunComposed});
}

}  // namespace pg::ops
