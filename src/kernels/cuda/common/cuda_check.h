// Host-side checks for the CUDA runtime and cuBLASLt (one macro per external library,
// DESIGN.md example 6). A failed call throws pg::Error: out of device memory is
// kResourceExhausted (a request can cause it), anything else kInternal with the call's text,
// file and line. Host code only (never include from device code).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "core/status.h"

namespace pg::cuda::detail {
[[noreturn]] void ThrowCuda(cudaError_t err, const char* expr, const char* file, int line);
[[noreturn]] void ThrowCublas(cublasStatus_t st, const char* expr, const char* file, int line);
}  // namespace pg::cuda::detail

#define PG_CUDA_CHECK(expr)                                                    \
  do {                                                                         \
    cudaError_t pg_cuda_err_ = (expr);                                         \
    if (pg_cuda_err_ != cudaSuccess) [[unlikely]]                              \
      ::pg::cuda::detail::ThrowCuda(pg_cuda_err_, #expr, __FILE__, __LINE__);  \
  } while (0)

#define PG_CUBLAS_CHECK(expr)                                                      \
  do {                                                                             \
    cublasStatus_t pg_cublas_st_ = (expr);                                         \
    if (pg_cublas_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                       \
      ::pg::cuda::detail::ThrowCublas(pg_cublas_st_, #expr, __FILE__, __LINE__);   \
  } while (0)

// After a kernel launch: reports launch-configuration errors (not asynchronous faults).
#define PG_CUDA_CHECK_LAUNCH() PG_CUDA_CHECK(cudaGetLastError())
