#include "core/env.h"
#include "kernels/cuda/common/context.h"

#include <cstdint>
#include <cstdlib>

#include <algorithm>
#include <array>
#include <vector>

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/device_params.h"

namespace pg::cuda {

namespace detail {
void ThrowCuda(cudaError_t err, const char* expr, const char* file, int line) {
  const ErrorCode code =
      err == cudaErrorMemoryAllocation ? ErrorCode::kResourceExhausted : ErrorCode::kInternal;
  cudaGetLastError();  // clear a sticky launch error so later calls report their own
  Throw(code, "CUDA error {} ({}) in {} at {}:{}", cudaGetErrorName(err), cudaGetErrorString(err),
        expr, file, line);
}
void ThrowCublas(cublasStatus_t st, const char* expr, const char* file, int line) {
  Throw(st == CUBLAS_STATUS_ALLOC_FAILED ? ErrorCode::kResourceExhausted : ErrorCode::kInternal,
        "cuBLASLt error {} ({}) in {} at {}:{}", int(st), cublasLtGetStatusName(st), expr, file,
        line);
}
}  // namespace detail

namespace {

// Invariant: a scratch buffer, once handed out, stays allocated until the thread exits.
// CUDA graphs captured earlier hold its address (GpuRunner captures the smaller batch sizes
// first, and an eager prefill may grow a slot after capture); freeing it on growth would
// leave those graphs reading and writing freed memory. Grown-out buffers are retired instead
// (growth is geometric, so they cost at most a few times the final size).
struct ThreadState {
  cudaStream_t stream = nullptr;
  std::array<void*, size_t(ScratchSlot::kCount)> scratch{};
  std::array<size_t, size_t(ScratchSlot::kCount)> scratch_bytes{};
  std::vector<void*> retired;
  ~ThreadState() {
    // Errors ignored: the context may already be gone at exit.
    for (void* p : scratch)
      if (p) cudaFree(p);
    for (void* p : retired) cudaFree(p);
  }
};

ThreadState& State() {
  thread_local ThreadState state;
  return state;
}

}  // namespace

cudaStream_t CurrentStream() { return State().stream; }

StreamScope::StreamScope(cudaStream_t s) : prev_(State().stream) { State().stream = s; }
StreamScope::~StreamScope() { State().stream = prev_; }

bool IsCapturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  PG_CUDA_CHECK(cudaStreamIsCapturing(s, &st));
  return st != cudaStreamCaptureStatusNone;
}

void* Scratch(ScratchSlot slot, size_t bytes) {
  ThreadState& t = State();
  const size_t i = size_t(slot);
  if (t.scratch_bytes[i] >= bytes && t.scratch[i]) return t.scratch[i];
  PG_ENSURE(!IsCapturing(t.stream), kInternal,
            "CUDA scratch must grow to {} bytes during graph capture: warm this shape up first",
            bytes);
  // The old buffer is retired, not freed (see ThreadState): captured graphs may use it.
  if (t.scratch[i]) t.retired.push_back(t.scratch[i]);
  t.scratch[i] = nullptr;
  t.scratch_bytes[i] = 0;
  const size_t grown = bytes < 4096 ? 4096 : bytes + bytes / 4;
  PG_CUDA_CHECK(cudaMalloc(&t.scratch[i], grown));
  t.scratch_bytes[i] = grown;
  return t.scratch[i];
}

int MultiprocessorCount() {
  thread_local int count = [] {
    int dev = 0, n = 0;
    PG_CUDA_CHECK(cudaGetDevice(&dev));
    PG_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
  }();
  return count;
}

L2After MakeL2After(const void* ptr, int64_t bytes, int pct) {
  pct = std::clamp(pct, 0, 100);
  if (ptr == nullptr || bytes < 16 || pct == 0 || (reinterpret_cast<uintptr_t>(ptr) & 15) != 0)
    return {};
  return {.ptr = static_cast<const char*>(ptr), .bytes = bytes, .slices = MultiprocessorCount(),
          .pct = pct};
}

bool PdlEnabled() {
  static const bool enabled = EnvFlag("PEREGRINE_PDL", true);
  return enabled;
}

int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace pg::cuda
