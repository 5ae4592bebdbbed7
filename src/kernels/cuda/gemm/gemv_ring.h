// The ring decode GEMV (gemv_ring.cu): LaunchGemv's kernel for 1-4 activation rows whose
// memory parallelism does not depend on its warp count, so it leaves room on every SM for
// the next kernel's block to start streaming its weights early (PDL). Same GemvArgs, same
// fused options and bitwise the same outputs as gemv.cu's warp kernel (gemv_device.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common/device_params.h"
#include "kernels/cuda/moe/moe_params.h"  // Fp8GemvArgs

namespace pg::cuda {

// Whether the ring kernel takes the arguments: 1 <= n <= 4, 16-byte rows (k, ldx, ldw % 8,
// aligned x and w), x's rows fit the kernel's staging when normalised, and the mode (below)
// selects it for this shape.
bool GemvRingTake(const GemvArgs& a);
void LaunchGemvRing(const GemvArgs& a, cudaStream_t stream);
// The same kernel on fp8 e4m3 weights with a per-tensor or per-row scale (the dense fp8
// Matmul at <= 4 rows, fp8_matmul.cpp): bitwise the sums of cuda/moe's f32 Fp8GemvKernel
// (LaunchFp8GemvF32). Takes
// 1 <= n <= 4, k % 16 == 0, ldw % 16 == 0, ldx % 8 == 0, 16-byte aligned x and w.
bool Fp8GemvRingTake(const Fp8GemvArgs& a);
void LaunchFp8GemvRing(const Fp8GemvArgs& a, cudaStream_t stream);

// Mode: kShape (default) picks the ring where it measured faster (gemv_ring.cu); kOn takes
// every supported shape, kOff none. The environment (PEREGRINE_GEMV_RING: 0 off, 1 on,
// unset: by shape) sets the process's mode; tests and benches override it here.
enum class GemvRingMode { kShape, kOn, kOff };
void SetGemvRingMode(GemvRingMode mode);
GemvRingMode GetGemvRingMode();
// Launches of the ring kernel by this process (tests check the ring actually ran).
int64_t GemvRingLaunches();
// Staged x widened to f32 in shared memory (one bf16-weight activation row whose f32 rows fit
// PEREGRINE_GEMV_RING_XF32_MAX_KB): a mask, bit 0 normed projections, bit 1 the others (3, the
// default: both; 0 off); the process default from PEREGRINE_GEMV_RING_XF32. Returns the
// previous setting (tests run both forms). Same sums.
int SetGemvRingXF32(int mode);
// Two weight rows a warp at one activation row (-1, the default: every projection but SwiGLU's,
// whose warps stream two already; else a mask, bit 0 normed, bit 1 the others); the process
// default from PEREGRINE_GEMV_RING_PAIR1. Returns the previous one.
int SetGemvRingPair1(int mode);
int64_t GemvRingXF32Launches();  // launches that staged x as f32

}  // namespace pg::cuda
