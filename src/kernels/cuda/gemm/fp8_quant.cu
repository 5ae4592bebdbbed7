// Activation quantization for the fp8 GEMM: one dynamic per-tensor scale,
//   x_scale = max(amax(x), tiny) / 448,  xq = e4m3_satfinite(x / x_scale).
// Two launches (amax, then quantize) on fixed buffers: graph-capturable.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "kernels/cuda/gemm/fp8_quant.h"

namespace pg::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kE4M3Max = 448.0f;

__global__ void AmaxKernel(Fp8QuantArgs a) {
  float m = 0.0f;
  const int64_t total = a.n * a.k;
  for (int64_t e = int64_t(blockIdx.x) * kThreads + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * kThreads) {
    const int64_t r = e / a.k, i = e % a.k;
    m = fmaxf(m, fabsf(__bfloat162float(a.x[r * a.ldx + i])));
  }
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  // Non-negative floats order as their bit patterns: an integer max is a float max.
  if (threadIdx.x % 32 == 0) atomicMax(reinterpret_cast<unsigned*>(a.amax), __float_as_uint(m));
}

__global__ void QuantKernel(Fp8QuantArgs a) {
  const float scale = fmaxf(*a.amax, 1e-12f) / kE4M3Max;
  const float inv = 1.0f / scale;
  if (blockIdx.x == 0 && threadIdx.x == 0) *a.scale = scale;
  const int64_t total = a.n * a.k;
  for (int64_t e = int64_t(blockIdx.x) * kThreads + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * kThreads) {
    const int64_t r = e / a.k, i = e % a.k;
    const float v = __bfloat162float(a.x[r * a.ldx + i]) * inv;
    a.xq[r * a.ldq + i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  }
}

}  // namespace

void LaunchFp8Quant(const Fp8QuantArgs& a, cudaStream_t stream) {
  if (a.n == 0 || a.k == 0) return;
  const int64_t total = a.n * a.k;
  const unsigned blocks = unsigned(std::min<int64_t>((total + kThreads - 1) / kThreads, 1024));
  cudaMemsetAsync(a.amax, 0, sizeof(float), stream);
  AmaxKernel<<<blocks, kThreads, 0, stream>>>(a);
  QuantKernel<<<blocks, kThreads, 0, stream>>>(a);
}

}  // namespace pg::cuda
