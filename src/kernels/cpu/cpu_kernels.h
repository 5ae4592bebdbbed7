// Registration entry points of the CPU backend's files (called by RegisterCpuKernels).
#pragma once

#include "kernels/registry.h"

namespace pg::ops::cpu {
void RegisterMatmul(Registry& r);       // matmul_gemv.cpp, matmul_gemm.cpp
void RegisterAttention(Registry& r);    // attention.cpp
void RegisterElementwise(Registry& r);  // elementwise.cpp
}  // namespace pg::ops::cpu
