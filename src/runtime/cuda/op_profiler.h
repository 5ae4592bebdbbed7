// Per-op GPU time of one eager forward (`bench gpu-decode --profile`): an ops::OpObserver that
// records a CUDA event pair around each op's launches on the current stream. The first op
// after the forward's Embedding (which synchronises outside graphs) is preceded by a spin
// kernel of `lead_us`, so the host enqueues the rest of the step behind it and the events time
// the GPU's back-to-back execution, not host launch gaps (as a CUDA graph would run it).
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <string_view>
#include <vector>

#include "kernels/registry.h"

namespace pg::runtime::cuda {

struct OpTime {
  std::string op;
  int calls = 0;
  double us = 0;
};

class OpProfiler final : public ops::OpObserver {
 public:
  explicit OpProfiler(int max_ops = 8192, double lead_us = 50000);
  ~OpProfiler() override;
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  void Begin(std::string_view op) override;
  void End(std::string_view op) override;

  // After the stream synchronised: per op name (descending time), and every call in order.
  std::vector<OpTime> ByOp() const;
  std::vector<OpTime> Calls() const;
  // Installs itself as this thread's observer for its lifetime in scope.
  struct Scope {
    explicit Scope(OpProfiler& p) : prev(ops::CurrentOpObserver()) { ops::CurrentOpObserver() = &p; }
    ~Scope() { ops::CurrentOpObserver() = prev; }
    ops::OpObserver* prev;
  };

 private:
  std::vector<cudaEvent_t> events_;  // 2 per call
  std::vector<std::string> names_;
  double lead_us_;
  bool spun_ = false;
  bool dropped_ = false;
  int depth_ = 0;  // ops dispatched inside an op (e.g. a fused op's matmul) time with their parent
};

}  // namespace pg::runtime::cuda
