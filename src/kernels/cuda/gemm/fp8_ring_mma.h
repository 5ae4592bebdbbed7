// The ring tensor-core fp8 GEMV (fp8_ring_mma.cu): gemv_ring.cu's producer / bulk-copy ring
// with cuda/moe's tensor-core consumers (fp8_mma.cuh). LaunchFp8Gemv (cuda/moe/fp8_gemv.cu)
// runs it where Fp8GemvVariant::ring selects it; same Fp8GemvArgs (every scale mode, bias,
// accumulate, 1-8 activation rows a pass) plus the fused norm / SwiGLU options (FusedMatmul's
// cuda_fp8_ring). Its summation order depends only on the consumer warp count (8 or 16),
// not on the ring layout.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common/device_params.h"
#include "kernels/cuda/moe/moe_params.h"

namespace pg::cuda {

// Shapes the kernel takes: n, m >= 1, k % 64 == 0, ldw % 16 == 0, ldx % 8 == 0, x and w
// 16-byte aligned, a scale mode, an output.
bool Fp8RingMmaFits(const Fp8GemvArgs& a);
// Where it measured faster than Fp8GemvMmaKernel (Fp8GemvVariant::ring == 2).
bool Fp8RingMmaWants(const Fp8GemvArgs& a);
// Passes of 8 activation rows; v: the ring's piece size and depth.
void LaunchFp8RingMma(const Fp8GemvArgs& a, cudaStream_t stream, const Fp8GemvVariant& v);

// The same kernel on bf16 weights (GemvArgs: LaunchGemv's dense decode GEMV at 2-4 rows, with
// the fused RMSNorm prologue / SwiGLU epilogue, bias and accumulate; no f32 output). Its
// layout knobs are GetFp8GemvVariant()'s ring_* fields; the summation order depends only on
// the consumer warp count, as for fp8. Fits: 1 <= n <= 8, k % 64 == 0, ldw and ldx % 8 == 0,
// 16-byte aligned x and w, w_constant (its producer streams w before the PDL wait), x's rows
// within the staging when normalised, no swiglu with accumulate.
bool Bf16RingMmaFits(const GemvArgs& a);
// Mode: kShape (default) takes 2-4 rows in Bf16RingMmaTake (5-8 stay with cuBLASLt: measured
// faster there) and, in Bf16RingMmaFirst, one row of an accumulating projection without norm
// or swiglu whose block shares fit the ring whole (an o projection of 2048 rows); kOn every
// shape that fits (1-8 rows), kOff none.
// PEREGRINE_BF16_RING_MMA (0 off, 1 on, unset: by shape) sets the process's mode; tests and
// benches override it here. PEREGRINE_BF16_RING_MMA_ONE_ROW=0 turns the one-row rule off.
enum class Bf16RingMmaMode { kShape, kOn, kOff };
bool Bf16RingMmaTake(const GemvArgs& a);
// The one-row rule (not under kOff): LaunchGemv launches by it before gemv_ring.cu —
// LaunchBf16RingMmaFirst launches when Bf16RingMmaFirst holds and says whether it did, so the
// rule is asked once a launch.
bool Bf16RingMmaFirst(const GemvArgs& a);
bool LaunchBf16RingMmaFirst(const GemvArgs& a, cudaStream_t stream);
void LaunchBf16RingMma(const GemvArgs& a, cudaStream_t stream);
void SetBf16RingMmaMode(Bf16RingMmaMode mode);
Bf16RingMmaMode GetBf16RingMmaMode();
int64_t Bf16RingMmaLaunches();  // launches by this process (tests check it ran)

}  // namespace pg::cuda
