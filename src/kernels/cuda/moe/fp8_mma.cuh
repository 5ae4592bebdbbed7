// Tensor-core helpers of the fp8 e4m3 GEMVs (moe/fp8_gemv.cu Fp8GemvMmaKernel and
// gemm/fp8_ring_mma.cu): e4m3 -> bf16 widening by bit operations and mma.sync m16n8k16 over
// 16 columns a lane. Weights are the MMA's A operand (16 weight rows), activations its B
// operand (8 activation rows as the 8 columns), f32 accumulation.
#pragma once

#include <cstdint>

namespace pg::cuda::fp8mma {

// 4 e4m3 values (the bytes of q, first element in the low byte) as two bf16x2 words, lo =
// (e0, e1) and hi = (e2, e3), each value times 2^-120 exactly: the e4m3 exponent and mantissa
// bits land in the low bits of bf16's exponent and the top of its mantissa (bias 7 read as
// 127), so normal e4m3 become normal bf16 and subnormal e4m3 subnormal bf16, same mantissa
// (the H200's tensor cores keep bf16 subnormals: Fp8Gemv.* checks weights of only subnormal
// codes, request 1 also bitwise against widening to the exact values with a bf16 multiply).
// 4 integer instructions a pair (byte permute, shift, mask, merge the sign).
__device__ __forceinline__ void E4m3x4ToBf16x2(uint32_t q, uint32_t& lo, uint32_t& hi) {
  const uint32_t l = __byte_perm(q, 0u, 0x1404);  // [e1 0 e0 0]: a value in each lane's high byte
  const uint32_t h = __byte_perm(q, 0u, 0x3424);  // [e3 0 e2 0]
  lo = (l & 0x80008000u) | ((l >> 4) & 0x07F007F0u);
  hi = (h & 0x80008000u) | ((h >> 4) & 0x07F007F0u);
}

// d += A (16 x 16 bf16, row-major fragment) * B (16 x 8 bf16, column fragment), f32.
__device__ __forceinline__ void MmaBf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// 16 columns of a lane: wa / wb hold 16 weights of rows g and g + 8 (g = lane / 4), x0 / x1 the
// same 16 columns of activation row g (zero for g >= rows). Four MMAs, MMA i on the lane's
// columns 4i .. 4i + 3: the fragment's k positions (2q, 2q + 1) hold columns +0, +1 and
// (2q + 8, 2q + 9) columns +2, +3, q = lane % 4 (any k order works when A and B agree).
__device__ __forceinline__ void Mma16(const uint4& wa, const uint4& wb, const uint4& x0,
                                      const uint4& x1, float (&d)[4]) {
  const uint32_t wav[4] = {wa.x, wa.y, wa.z, wa.w}, wbv[4] = {wb.x, wb.y, wb.z, wb.w};
  const uint32_t xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t a0, a2, a1, a3;
    E4m3x4ToBf16x2(wav[i], a0, a2);
    E4m3x4ToBf16x2(wbv[i], a1, a3);
    MmaBf16(d, a0, a1, a2, a3, xv[2 * i], xv[2 * i + 1]);
  }
}

// Mma16 with each of its four MMAs accumulating into its own d[i]: no dependency between the
// four (the ring kernel's consumers were bound by the 4-deep accumulation chain of a step);
// the caller adds the four at the end (another summation order than Mma16's).
__device__ __forceinline__ void Mma16Split(const uint4& wa, const uint4& wb, const uint4& x0,
                                           const uint4& x1, float (&d)[4][4]) {
  const uint32_t wav[4] = {wa.x, wa.y, wa.z, wa.w}, wbv[4] = {wb.x, wb.y, wb.z, wb.w};
  const uint32_t xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t a0, a2, a1, a3;
    E4m3x4ToBf16x2(wav[i], a0, a2);
    E4m3x4ToBf16x2(wbv[i], a1, a3);
    MmaBf16(d[i], a0, a1, a2, a3, xv[2 * i], xv[2 * i + 1]);
  }
}

// Mma16Split on bf16 weights (gemm/fp8_ring_mma.cu's bf16 instantiation): wa0 / wa1 hold 16
// weights of row g (columns 0-7, 8-15 of the lane's 16), wb0 / wb1 of row g + 8; the same
// fragment layout as Mma16Split (MMA i on the lane's columns 4i .. 4i + 3), no widening.
__device__ __forceinline__ void Mma16SplitBf16(const uint4& wa0, const uint4& wa1, const uint4& wb0,
                                               const uint4& wb1, const uint4& x0, const uint4& x1,
                                               float (&d)[4][4]) {
  const uint32_t wav[8] = {wa0.x, wa0.y, wa0.z, wa0.w, wa1.x, wa1.y, wa1.z, wa1.w};
  const uint32_t wbv[8] = {wb0.x, wb0.y, wb0.z, wb0.w, wb1.x, wb1.y, wb1.z, wb1.w};
  const uint32_t xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
  for (int i = 0; i < 4; ++i)
    MmaBf16(d[i], wav[2 * i], wbv[2 * i], wav[2 * i + 1], wbv[2 * i + 1], xv[2 * i], xv[2 * i + 1]);
}

}  // namespace pg::cuda::fp8mma
