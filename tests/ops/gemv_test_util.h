// Helpers of the device GEMV tests (gemv_ring_test.cpp, fp8_ring_mma_test.cpp): device
// buffers, bf16 rows for upload, and an fp8 case's CPU reference (ground truth).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/quant.h"
#include "op_test_util.h"  // (and device_mirror.h: PG_TEST_CUDA)

namespace pg::ops::testing {

// Device copy of a host buffer.
struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) { PG_TEST_CUDA(cudaMalloc(&p, bytes)); }
  Dev(const void* host, size_t bytes) : Dev(bytes) {
    PG_TEST_CUDA(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
  }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
};

// bf16 bits of an f32 [rows, cols] matrix, rows `ld` apart.
inline std::vector<uint16_t> Bf16Rows(const float* v, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<uint16_t> out(size_t(rows * ld), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[size_t(r * ld + c)] = F32ToBf16(v[r * cols + c]);
  return out;
}

// An fp8 case's reference: out_init (normal values rounded to bf16, the device output's
// initial contents) and ref = the reference Matmul of x, w, scale (and bias) onto a copy of it
// (accumulate) or in its place.
struct Fp8Ref {
  Tensor out_init, ref;
};
inline Fp8Ref Fp8Reference(const Tensor& x, const Tensor& w, const Tensor& scale, const Tensor* bias,
                    bool accumulate) {
  const int64_t n = x.view().dim(0), m = w.view().dim(0);
  Fp8Ref r{Tensor(DType::kF32, {n, m}), Tensor(DType::kF32, {n, m})};
  FillNormal(r.out_init);
  RoundToBf16(r.out_init);
  Restore(r.ref, Copy(r.out_init));
  MatmulParams p{.x = x.view(), .w = w.view(), .out = r.ref.view(), .w_scale = scale.view()};
  if (bias) p.bias = bias->view();
  p.accumulate = accumulate;
  RunWith(RefImpl<MatmulParams>(), p);
  return r;
}

}  // namespace pg::ops::testing
