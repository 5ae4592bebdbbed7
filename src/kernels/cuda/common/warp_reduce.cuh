// Full-warp reductions (every lane of the warp calls them, converged; each lane gets the
// warp's result): xor butterflies over 32 lanes, so the order of the sums is the same in
// every lane and in every kernel that uses them.
#pragma once

namespace pg::cuda {

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace pg::cuda
