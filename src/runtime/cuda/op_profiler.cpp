#include "runtime/cuda/op_profiler.h"

#include <algorithm>
#include <map>

#include "core/log.h"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/spin.h"

namespace pg::runtime::cuda {

OpProfiler::OpProfiler(int max_ops, double lead_us) : lead_us_(lead_us) {
  events_.resize(size_t(2 * max_ops));
  for (cudaEvent_t& e : events_) PG_CUDA_CHECK(cudaEventCreate(&e));
}

OpProfiler::~OpProfiler() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

void OpProfiler::Begin(std::string_view op) {
  if (depth_++ > 0) return;  // nested: an unrecorded begin event would fail ElapsedTime
  cudaStream_t s = pg::cuda::CurrentStream();
  if (!spun_ && op != "Embedding") {
    pg::cuda::LaunchSpin(lead_us_, s);
    spun_ = true;
  }
  const size_t i = 2 * names_.size();
  if (i + 1 >= events_.size()) {
    dropped_ = true;
    return;
  }
  PG_CUDA_CHECK(cudaEventRecord(events_[i], s));
}

void OpProfiler::End(std::string_view op) {
  if (--depth_ > 0) return;
  const size_t i = 2 * names_.size();
  if (i + 1 >= events_.size()) return;
  PG_CUDA_CHECK(cudaEventRecord(events_[i + 1], pg::cuda::CurrentStream()));
  names_.emplace_back(op);
}

std::vector<OpTime> OpProfiler::Calls() const {
  if (dropped_) PG_LOG_WARN("op profiler: more ops than events; later ops not timed");
  std::vector<OpTime> out;
  for (size_t c = 0; c < names_.size(); ++c) {
    float ms = 0;
    PG_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[2 * c], events_[2 * c + 1]));
    out.push_back({names_[c], 1, double(ms) * 1e3});
  }
  return out;
}

std::vector<OpTime> OpProfiler::ByOp() const {
  std::map<std::string, OpTime> by;
  for (const OpTime& t : Calls()) {
    OpTime& a = by[t.op];
    a.op = t.op;
    a.calls += 1;
    a.us += t.us;
  }
  std::vector<OpTime> out;
  for (auto& [k, v] : by) out.push_back(v);
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.us > b.us; });
  return out;
}

}  // namespace pg::runtime::cuda
