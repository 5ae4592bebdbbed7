#include "models/cpu_pack.h"

#include <optional>

#include "core/log.h"
#include "core/quant.h"
#include "core/status.h"
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
  for (TensorView* w : to_f32_) {
    PG_CHECK(w->ndim == 2, "AddDenseF32 takes matrices, not {}", w->ShapeString());
    const int64_t rows = w->dim(0), cols = w->dim(1);
    if (w->dtype == DType::kF32 && w->strides[0] == cols) continue;
    Tensor t(DType::kF32, {rows, cols});
    ThreadPool::Default().ParallelFor(rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        quant::DequantizeRow(w->dtype, w->row_ptr(r), t.data<float>() + r * cols, cols);
    });
    *w = t.view();
    bytes += t.nbytes();
    owned_.push_back(std::move(t));
  }
  todo_.clear();
  to_f32_.clear();
  packed_ = true;
  return bytes;
}

}  // namespace pg::models
