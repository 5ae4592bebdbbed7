#include "runtime/cuda/stream.h"

#include <utility>

#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/cuda_check.h"

namespace pg::runtime::cuda {

Stream::Stream() { PG_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
Stream::~Stream() {
  if (s_) cudaStreamDestroy(s_);
}
Stream::Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (s_) cudaStreamDestroy(s_);
    s_ = std::exchange(o.s_, nullptr);
  }
  return *this;
}
void Stream::Synchronize() const { PG_CUDA_CHECK(cudaStreamSynchronize(s_)); }

Event::Event() { PG_CUDA_CHECK(cudaEventCreate(&e_)); }
Event::~Event() {
  if (e_) cudaEventDestroy(e_);
}
Event::Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (e_) cudaEventDestroy(e_);
    e_ = std::exchange(o.e_, nullptr);
  }
  return *this;
}
void Event::Record(cudaStream_t s) const { PG_CUDA_CHECK(cudaEventRecord(e_, s)); }
void Event::Synchronize() const { PG_CUDA_CHECK(cudaEventSynchronize(e_)); }
float Event::ElapsedMsSince(const Event& start) const {
  float ms = 0;
  PG_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, e_));
  return ms;
}

CudaGraph::~CudaGraph() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
}
CudaGraph::CudaGraph(CudaGraph&& o) noexcept
    : graph_(std::exchange(o.graph_, nullptr)), exec_(std::exchange(o.exec_, nullptr)) {}
CudaGraph& CudaGraph::operator=(CudaGraph&& o) noexcept {
  if (this != &o) {
    this->~CudaGraph();
    graph_ = std::exchange(o.graph_, nullptr);
    exec_ = std::exchange(o.exec_, nullptr);
  }
  return *this;
}

void CudaGraph::Capture(cudaStream_t stream, const std::function<void()>& body) {
  PG_ENSURE(stream != nullptr, kInvalidArgument, "graph capture needs a non-default stream");
  if (exec_) {
    PG_CUDA_CHECK(cudaGraphExecDestroy(exec_));
    exec_ = nullptr;
  }
  if (graph_) {
    PG_CUDA_CHECK(cudaGraphDestroy(graph_));
    graph_ = nullptr;
  }
  PG_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    pg::cuda::StreamScope scope(stream);
    body();
  } catch (...) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(stream, &broken);  // leave the stream usable
    if (broken) cudaGraphDestroy(broken);
    throw;
  }
  PG_CUDA_CHECK(cudaStreamEndCapture(stream, &graph_));
  PG_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
}

void CudaGraph::Replay(cudaStream_t stream) const {
  PG_ENSURE(exec_ != nullptr, kInvalidArgument, "replay of a graph that was never captured");
  PG_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
}

void DecodeGraphs::CaptureAll(cudaStream_t stream, std::span<const int> sizes,
                              const std::function<void(int)>& body) {
  for (int n : sizes) {
    PG_ENSURE(n > 0, kInvalidArgument, "decode graph batch size {} must be > 0", n);
    CudaGraph g;
    g.Capture(stream, [&] { body(n); });
    graphs_[n] = std::move(g);
  }
}

int DecodeGraphs::PaddedSize(int n) const {
  auto it = graphs_.lower_bound(n);
  return it == graphs_.end() ? 0 : it->first;
}

void DecodeGraphs::Replay(int padded_size, cudaStream_t stream) const {
  auto it = graphs_.find(padded_size);
  PG_ENSURE(it != graphs_.end(), kInvalidArgument, "no decode graph for batch size {}",
            padded_size);
  it->second.Replay(stream);
}

}  // namespace pg::runtime::cuda
