// Dynamic per-tensor e4m3 quantization of bf16 activations (fp8_quant.cu), for LtMatmulFp8.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common/device_params.h"

namespace pg::cuda {

struct Fp8QuantArgs {
  const bf16* x;  // [n, k], row stride ldx
  uint8_t* xq;    // [n, k] e4m3 out, row stride ldq
  float* amax;    // device scratch, 1 value
  float* scale;   // device out: x ~= float(xq) * scale
  int64_t n, k, ldx, ldq;
};
void LaunchFp8Quant(const Fp8QuantArgs& a, cudaStream_t stream);

}  // namespace pg::cuda
