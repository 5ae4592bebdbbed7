#include "models/cpu_pack.h"

#include <optional>

#include "core/log.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace pg::models {

int64_t CpuPackedWeights::Pack() {
  std::vector<std::optional<Tensor>> packed(todo_.size());
  ThreadPool::Default().ParallelFor(int64_t(todo_.size()), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      packed[size_t(i)] = ops::PackMatmulWeightForCpu(*todo_[size_t(i)]);
  });
  int64_t bytes = 0, count = 0;
  for (size_t i = 0; i < todo_.size(); ++i) {
    if (!packed[i]) continue;
    *todo_[i] = packed[i]->view();
    bytes += packed[i]->nbytes();
    ++count;
    owned_.push_back(std::move(*packed[i]));
  }
  if (count > 0)
    PG_LOG_INFO("packed {} of {} weight matrices ({:.1f} MiB) for the CPU kernels", count,
                todo_.size(), double(bytes) / (1 << 20));
  todo_.clear();
  packed_ = true;
  return bytes;
}

}  // namespace pg::models
