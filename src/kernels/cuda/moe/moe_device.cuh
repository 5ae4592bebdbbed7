// Device helpers of the MoE kernels: fp8 e4m3 / bf16 weight chunks widened to f32, scale
// lookup (moe_params.h ScaleMode), SiLU.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/common/warp_reduce.cuh"
#include "kernels/cuda/moe/moe_params.h"

namespace pg::cuda::moe {

// A weight chunk is one 16-byte load: 16 fp8 or 8 bf16 elements.
template <bool kFp8>
inline constexpr int kChunk = kFp8 ? 16 : 8;

__device__ __forceinline__ float2 Fp8x2ToFloat2(uint16_t v) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v), __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

__device__ __forceinline__ float Fp8ToFloat(uint8_t v) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), __NV_E4M3);
  return __half2float(*reinterpret_cast<const __half*>(&h));
}

// raw (16 bytes) -> kChunk<kFp8> floats.
template <bool kFp8>
__device__ __forceinline__ void Widen(const uint4& raw, float* f) {
  if constexpr (kFp8) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const float2 v = Fp8x2ToFloat2(p[q]);
      f[2 * q] = v.x;
      f[2 * q + 1] = v.y;
    }
  } else {
    const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float2 v = __bfloat1622float2(p[q]);
      f[2 * q] = v.x;
      f[2 * q + 1] = v.y;
    }
  }
}

// Element i of a weight row (scalar path).
template <bool kFp8>
__device__ __forceinline__ float WeightAt(const void* row, int64_t i) {
  if constexpr (kFp8) return Fp8ToFloat(static_cast<const uint8_t*>(row)[i]);
  else return __bfloat162float(static_cast<const bf16*>(row)[i]);
}

// Scales of row r of an fp8 weight: a per-row factor (tensor / channel modes, 1 otherwise)
// and, in block mode, the row of 128-column block scales.
struct RowScale {
  float row = 1.0f;
  const float* blocks = nullptr;  // kBlock: scale of column c is blocks[c >> 7]
};
__device__ __forceinline__ RowScale ScaleOfRow(const float* s, ScaleMode mode, int scale_ld,
                                               int64_t r) {
  RowScale rs;
  if (mode == ScaleMode::kTensor) rs.row = __ldg(s);
  else if (mode == ScaleMode::kChannel) rs.row = __ldg(s + r);
  else if (mode == ScaleMode::kBlock) rs.blocks = s + (r >> 7) * scale_ld;
  return rs;
}

// x chunk (kChunk elements at x + c * kChunk) as floats: bf16 activations or f32 act.
template <int N>
__device__ __forceinline__ void LoadX(const bf16* x, int64_t c, float* f) {
  const uint4* p = reinterpret_cast<const uint4*>(x + c * N);
#pragma unroll
  for (int q = 0; q < N / 8; ++q) Widen<false>(__ldg(p + q), f + 8 * q);
}
template <int N>
__device__ __forceinline__ void LoadX(const float* x, int64_t c, float* f) {
  const float4* p = reinterpret_cast<const float4*>(x + c * N);
#pragma unroll
  for (int q = 0; q < N / 4; ++q) {
    const float4 v = __ldg(p + q);
    f[4 * q] = v.x, f[4 * q + 1] = v.y, f[4 * q + 2] = v.z, f[4 * q + 3] = v.w;
  }
}

__device__ __forceinline__ float Silu(float g) { return g / (1.0f + __expf(-g)); }

using ::pg::cuda::WarpSum;  // common/warp_reduce.cuh

}  // namespace pg::cuda::moe
