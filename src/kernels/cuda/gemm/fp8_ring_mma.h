// The ring tensor-core fp8 GEMV (fp8_ring_mma.cu): gemv_ring.cu's producer / bulk-copy ring
// with cuda/moe's tensor-core consumers (fp8_mma.cuh). LaunchFp8Gemv (cuda/moe/fp8_gemv.cu)
// runs it where Fp8GemvVariant::ring selects it; same Fp8GemvArgs (every scale mode, bias,
// accumulate, 1-8 activation rows a pass) plus the fused norm / SwiGLU options (FusedMatmul's
// cuda_fp8_ring). Its summation order depends only on the consumer warp count (8 or 16),
// not on the ring layout.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/moe/moe_params.h"

namespace pg::cuda {

// Shapes the kernel takes: n, m >= 1, k % 64 == 0, ldw % 16 == 0, ldx % 8 == 0, x and w
// 16-byte aligned, a scale mode, an output.
bool Fp8RingMmaFits(const Fp8GemvArgs& a);
// Where it measured faster than Fp8GemvMmaKernel (Fp8GemvVariant::ring == 2).
bool Fp8RingMmaWants(const Fp8GemvArgs& a);
// Passes of 8 activation rows; v: the ring's piece size and depth.
void LaunchFp8RingMma(const Fp8GemvArgs& a, cudaStream_t stream, const Fp8GemvVariant& v);

}  // namespace pg::cuda
