// bf16 GEMM through cuBLASLt with a per-shape algorithm cache.
//   out[n, m] = (accumulate ? out : 0) + x[n, k] · w[m, k]^T     (f32 accumulation, bf16 out)
// In cuBLASLt's column-major terms: D(m x n) = op_T(W stored k x m, ld ldw) · X(k x n, ld ldx).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/common/device_params.h"

namespace pg::cuda {

struct LtGemmArgs {
  const bf16* x;  // [n, k], row stride ldx
  const bf16* w;  // [m, k], row stride ldw
  bf16* out;      // [n, m], row stride ldo
  int64_t n, k, m, ldx, ldw, ldo;
  bool accumulate;
  // Strided batch (MLA's per-head GEMMs): batch b uses x + b * stride_x, w + b * stride_w,
  // out + b * stride_o (elements). w_km: w is stored [k, m] (row stride ldw) instead of [m, k].
  int64_t batch = 1, stride_x = 0, stride_w = 0, stride_o = 0;
  bool w_km = false;
};

// Runs the GEMM on `stream`. Returns false (nothing launched) when cuBLASLt offers no
// algorithm for this shape, strides and alignment; the caller then uses LaunchGemv. The first
// call of a shape queries the heuristic (host work, a few tens of µs); later calls reuse it.
bool LtMatmul(const LtGemmArgs& a, cudaStream_t stream);

// fp8 e4m3 GEMM (Hopper: both operands fp8):
//   out[n, m] = (accumulate ? out : 0) + x_scale * (xq[n, k] · (w[m, k] * w_scale)^T)
// w_scale: one device f32 (per tensor) or [m] (per output channel: cuBLASLt outer-vector
// scaling); x_scale: one device f32. Same contract as LtMatmul otherwise (false: no algorithm).
struct LtFp8Args {
  const uint8_t* x;      // [n, k] e4m3, row stride ldx
  const uint8_t* w;      // [m, k] e4m3, row stride ldw
  bf16* out;             // [n, m], row stride ldo
  int64_t n, k, m, ldx, ldw, ldo;
  bool accumulate;
  const float* x_scale;  // device, 1 value
  const float* w_scale;  // device, 1 value or [m]
  bool w_per_channel;
};
bool LtMatmulFp8(const LtFp8Args& a, cudaStream_t stream);
// Whether LtMatmulFp8 has an algorithm for a's shape, strides and alignments (host only).
bool LtFp8Available(const LtFp8Args& a);
// One line per fp8 shape planned: the heuristic status of each attempt (0: an algorithm,
// -1: none offered, else the cublasStatus_t) and the outcome.
std::string LtFp8Diagnostics();

// Number of distinct shapes in the algorithm cache (tests).
size_t LtCachedShapes();

}  // namespace pg::cuda
