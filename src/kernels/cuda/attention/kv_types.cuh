// Element access of the paged KV cache's two storage types (ops.h KvCacheView):
//   bf16        the value itself;
//   fp8 e4m3    value / scale, rounded to nearest-even and saturated to +-448 (NaN stays
//               NaN), the same rounding as the host's F32ToF8E4M3 (core/dtype.h).
// The scale is applied outside (attention folds k_scale into q and v_scale into the output).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace pg::cuda::kv {

using fp8 = __nv_fp8_e4m3;

template <typename T>
struct Traits;

template <>
struct Traits<__nv_bfloat16> {
  static constexpr int kVec = 8;  // elements per 16-byte vector
  // The 8 elements of a 16-byte vector, widened.
  __device__ __forceinline__ static void Widen(const uint4& u, float* f) {
    const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 x = __bfloat1622float2(p[i]);
      f[2 * i] = x.x, f[2 * i + 1] = x.y;
    }
  }
  __device__ __forceinline__ static __nv_bfloat16 From(float v) { return __float2bfloat16_rn(v); }
};

template <>
struct Traits<fp8> {
  static constexpr int kVec = 16;
  __device__ __forceinline__ static void Widen(const uint4& u, float* f) {
    const __nv_fp8x2_storage_t* p = reinterpret_cast<const __nv_fp8x2_storage_t*>(&u);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float2 x = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(p[i], __NV_E4M3)));
      f[2 * i] = x.x, f[2 * i + 1] = x.y;
    }
  }
  __device__ __forceinline__ static fp8 From(float v) {
    fp8 r;
    r.__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
    return r;
  }
};

}  // namespace pg::cuda::kv
