// Per-thread CUDA state of the kernel layer: the stream ops launch on, and scratch buffers.
//
// The ops API (ops.h) carries no stream: every CUDA kernel launches on the calling thread's
// current stream (default: the legacy default stream, 0). The runtime sets it with
// StreamScope around a step, so a step — and its CUDA graph capture — is one stream.
//
// Scratch buffers (split-K partials, cuBLASLt workspace, the embedding error flag) belong to
// the thread, grow to the largest request seen and never shrink; growing is refused
// (pg::Error) while the stream is capturing, so the runtime warms every shape up before
// capturing graphs. A grown-out buffer is retired, never freed before the thread exits:
// graphs captured earlier keep using it. No other allocation happens on the hot path.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace pg::cuda {

cudaStream_t CurrentStream();

class StreamScope {
 public:
  explicit StreamScope(cudaStream_t s);
  ~StreamScope();
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  cudaStream_t prev_;
};

// Whether `s` is capturing a CUDA graph now.
bool IsCapturing(cudaStream_t s);

enum class ScratchSlot : int {
  kAttentionPartials, kLtWorkspace, kErrorFlag,
  kMoe,  // MoeExperts (cuda/moe): routed activations, sort tables
  kFp8Act,  // fp8 Matmul (cuda/gemm): activations quantized to e4m3 and their scale
  kCount
};
// Device scratch of at least `bytes`; the address stays valid until the thread exits (a later,
// larger request gets a new buffer). Its contents are undefined.
void* Scratch(ScratchSlot slot, size_t bytes);

// Number of multiprocessors of the current device (cached).
int MultiprocessorCount();
// Number of CUDA devices visible (0 when there is no driver or no GPU); never throws.
int DeviceCount();

// Programmatic dependent launch on (default) or off (PEREGRINE_PDL=0); see pdl.cuh.
bool PdlEnabled();

}  // namespace pg::cuda
