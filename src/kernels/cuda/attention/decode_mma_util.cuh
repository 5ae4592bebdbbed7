// Register-level helpers of the tensor-core decode kernels (decode_attention_mma.cu,
// decode_stream.cu): 16-bit word access, fp8 e4m3 / bf16 -> f16 widening, and the m16n8k16
// MMA in f16 (fp8 caches: K and V widened to f16 exactly, q and p rounded to f16) or bf16
// (bf16 caches). Fragment layouts: mla/mma_util.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/mla/mma_util.cuh"

namespace pg::cuda::decode {

__device__ __forceinline__ uint32_t Word(const uint4& u, int i) {
  return i == 0 ? u.x : (i == 1 ? u.y : (i == 2 ? u.z : u.w));
}
// Two e4m3 (low and high byte of the 16-bit x) -> f16x2.
__device__ __forceinline__ uint32_t F8x2ToH2(uint32_t x) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(x & 0xffffu), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}
__device__ __forceinline__ uint32_t Bf2ToH2(uint32_t x) {
  const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x));
  const __half2 h = __floats2half2_rn(f.x, f.y);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t PackH2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
// c += a · b in f16 (the bf16 form is mla::Mma).
__device__ __forceinline__ void MmaF16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <bool kF8>
__device__ __forceinline__ void MmaT(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kF8) MmaF16(c, a, b0, b1);
  else mla::Mma(c, a, b0, b1);
}

}  // namespace pg::cuda::decode
