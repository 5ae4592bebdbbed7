// Device helpers shared by the row-wise kernels (elementwise.cu) and the fused GEMV prologue
// and epilogues (gemm/gemv.cu), so RMSNorm and SwiGLU round the same way wherever they run:
// f32 arithmetic on bf16 values, one bf16 rounding of each op's output.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/common/device_params.h"

namespace pg::cuda {

__device__ __forceinline__ float ToF(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ bf16 ToB(float v) { return __float2bfloat16_rn(v); }

// Element i of an RMSNorm weight vector of type t, as f32.
__device__ __forceinline__ float LoadNormWeight(const void* w, WeightType t, int64_t i) {
  switch (t) {
    case WeightType::kBF16: return __bfloat162float(static_cast<const bf16*>(w)[i]);
    case WeightType::kF16: return __half2float(static_cast<const __half*>(w)[i]);
    default: return static_cast<const float*>(w)[i];
  }
}

// RMSNorm's inverse root mean square from the row's sum of squares (f32) over `hidden`.
__device__ __forceinline__ float InvRms(float sum_sq, int64_t hidden, float eps) {
  return rsqrtf(sum_sq / float(hidden) + eps);
}

// RMSNorm's output element: v * inv_rms * weight, rounded once (as RmsNorm's out).
__device__ __forceinline__ bf16 NormElement(float v, float inv_rms, float weight) {
  return ToB(v * inv_rms * weight);
}

// SwiGLU's output from the bf16 gate and up values: silu(g) * u, rounded once.
// exp overflow -> inf -> silu = -0.
__device__ __forceinline__ bf16 SiluMul(float g, float u) {
  const float silu = g / (1.0f + expf(-g));
  return ToB(silu * u);
}

}  // namespace pg::cuda
