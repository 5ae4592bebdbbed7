#include "kernels/cuda/ceilings.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/fill.h"
#include "kernels/cuda/gemm/matmul_lt.h"

namespace pg::cuda {
namespace {

// cudaMalloc'd bytes freed on scope exit (start-up measurement only).
struct ScopedDeviceBytes {
  void* p = nullptr;
  explicit ScopedDeviceBytes(size_t bytes) { PG_CUDA_CHECK(cudaMalloc(&p, bytes)); }
  ~ScopedDeviceBytes() { cudaFree(p); }
  ScopedDeviceBytes(const ScopedDeviceBytes&) = delete;
  ScopedDeviceBytes& operator=(const ScopedDeviceBytes&) = delete;
};

struct ScopedStreamEvents {
  cudaStream_t s = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  ScopedStreamEvents() {
    PG_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    PG_CUDA_CHECK(cudaEventCreate(&e0));
    PG_CUDA_CHECK(cudaEventCreate(&e1));
  }
  ~ScopedStreamEvents() {
    cudaStreamSynchronize(s);
    cudaEventDestroy(e0), cudaEventDestroy(e1), cudaStreamDestroy(s);
  }
  float ElapsedMs() {
    PG_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    PG_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return ms;
  }
};

}  // namespace

double MeasureHbmBytesPerS() {
  const size_t bytes = size_t(2) << 30;
  ScopedDeviceBytes a(bytes), b(bytes);
  ScopedStreamEvents t;
  PG_CUDA_CHECK(cudaMemsetAsync(a.p, 1, bytes, t.s));
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    PG_CUDA_CHECK(cudaEventRecord(t.e0, t.s));
    for (int i = 0; i < 8; ++i)
      PG_CUDA_CHECK(cudaMemcpyAsync(i % 2 ? a.p : b.p, i % 2 ? b.p : a.p, bytes,
                                    cudaMemcpyDeviceToDevice, t.s));
    PG_CUDA_CHECK(cudaEventRecord(t.e1, t.s));
    const double ms = t.ElapsedMs();
    if (rep == 0) continue;  // warm-up
    best = std::max(best, 2.0 * 8 * double(bytes) / (ms * 1e-3));
  }
  return best;
}

double MeasureBf16GemmFlopsPerS(int64_t size) {
  PG_ENSURE(size > 0, kInvalidArgument, "GEMM size {} must be > 0", size);
  const int64_t s = size;
  const size_t bytes = size_t(s * s) * 2;
  ScopedDeviceBytes x(bytes), w(bytes), o(bytes);
  ScopedStreamEvents t;
  LaunchFillRandom({x.p, s * s, true, 0.0f, 1.0f, 2}, t.s);
  LaunchFillRandom({w.p, s * s, true, 0.0f, 1.0f, 3}, t.s);
  PG_CUDA_CHECK_LAUNCH();
  const LtGemmArgs g{static_cast<const bf16*>(x.p), static_cast<const bf16*>(w.p),
                     static_cast<bf16*>(o.p), s, s, s, s, s, s, false};
  std::vector<float> ms;
  for (int i = 0; i < 13; ++i) {
    PG_CUDA_CHECK(cudaEventRecord(t.e0, t.s));
    PG_ENSURE(LtMatmul(g, t.s), kInternal, "cuBLASLt offers no algorithm for a {}^3 GEMM", s);
    PG_CUDA_CHECK(cudaEventRecord(t.e1, t.s));
    const float m = t.ElapsedMs();
    if (i >= 3) ms.push_back(m);  // 3 warm-ups
  }
  std::sort(ms.begin(), ms.end());
  return 2.0 * double(s) * double(s) * double(s) / (double(ms[ms.size() / 2]) * 1e-3);
}

}  // namespace pg::cuda
