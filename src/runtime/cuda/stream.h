// RAII CUDA streams and events, and CUDA graph capture of a step (decode steps are many
// small launches: replaying a captured graph removes the per-launch CPU cost).
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <span>

namespace pg::runtime::cuda {

// A non-blocking stream (does not synchronise with the legacy default stream). Move-only.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(Stream&& o) noexcept;
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  void Synchronize() const;

 private:
  cudaStream_t s_ = nullptr;
};

// An event with timing. Move-only.
class Event {
 public:
  Event();
  ~Event();
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }
  void Record(cudaStream_t s) const;
  void Synchronize() const;
  // Milliseconds from `start` to this event (both recorded and complete).
  float ElapsedMsSince(const Event& start) const;

 private:
  cudaEvent_t e_ = nullptr;
};

// One captured step. Capture() runs `body` with `stream` as the kernels' current stream
// (kernels/cuda/common/context.h) while the stream records; nothing executes until Replay.
// Every buffer the body touches must keep its address across replays (arena, batch plan).
class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(CudaGraph&& o) noexcept;
  CudaGraph& operator=(CudaGraph&& o) noexcept;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void Capture(cudaStream_t stream, const std::function<void()>& body);
  void Replay(cudaStream_t stream) const;
  bool captured() const { return exec_ != nullptr; }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// Decode graphs for a fixed set of batch sizes; a batch runs in the graph of the smallest
// captured size >= its size (the caller pads its batch to that size).
class DecodeGraphs {
 public:
  // body(batch_size): issues one decode step for a padded batch of that size.
  void CaptureAll(cudaStream_t stream, std::span<const int> batch_sizes,
                  const std::function<void(int)>& body);
  // The padded size for `n` sequences, or 0 when n exceeds every captured size.
  int PaddedSize(int n) const;
  void Replay(int padded_size, cudaStream_t stream) const;

 private:
  std::map<int, CudaGraph> graphs_;
};

}  // namespace pg::runtime::cuda
