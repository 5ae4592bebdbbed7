// RoPE rotation of one pair (x0, x1) at position `pos` with inverse frequency `inv_freq`
// (kernels/rope_freq.h: the angle is the float32 product, as HF). Shared by the Rope kernel
// (elementwise/) and the fused RoPE + KV write (attention/kv_write.cu).
#pragma once

namespace pg::cuda {

__device__ __forceinline__ void RopeRotate(float& x0, float& x1, float inv_freq, float pos) {
  float s, c;
  sincosf(inv_freq * pos, &s, &c);
  const float r0 = x0 * c - x1 * s, r1 = x1 * c + x0 * s;
  x0 = r0, x1 = r1;
}

// Indices of pair i of `half` pairs: neox (i, i + half) or interleaved (2i, 2i + 1).
__device__ __forceinline__ void RopePairIndex(bool neox, int i, int half, int& i0, int& i1) {
  i0 = neox ? i : 2 * i;
  i1 = neox ? i + half : 2 * i + 1;
}

}  // namespace pg::cuda
