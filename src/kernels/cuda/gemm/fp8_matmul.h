// The paths of the fp8 e4m3 Matmul with per-tensor / per-channel scales (fp8_matmul.cpp), for
// its registry entries and the benchmark that compares them. Params validated (registry.h);
// all run on the current stream.
#pragma once

#include "kernels/ops.h"

namespace pg::ops::fp8 {

void RunGemv(const MatmulParams& p);      // any n (passes of 8 rows)
bool RunLtOnly(const MatmulParams& p);    // cuBLASLt e4m3 x e4m3; false: no algorithm
bool RunTiled(const MatmulParams& p);     // cuda/moe's tiled GEMM; false: shape not aligned
void RunGemm(const MatmulParams& p);      // cuBLASLt, else tiled, else GEMV

}  // namespace pg::ops::fp8
