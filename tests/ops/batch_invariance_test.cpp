// Batch invariance: what the dispatcher computes for one row must not depend on which other
// rows share the batch. The engine relies on it — a request gives the same greedy tokens alone
// or batched with others (docs/design/engine.md) — so each row's result must be BITWISE equal
// whether it runs alone or inside batches of every size (the decode GEMV sizes, the GEMV/GEMM
// boundary, prefill sizes).
#include <gtest/gtest.h>

#include <cstring>

#include <fmt/format.h>

#include "core/quant.h"
#include "kernels/ops.h"
#include "op_test_util.h"

namespace pg::ops::testing {
namespace {

Tensor QuantizedWeight(DType dt, int64_t m, int64_t k) {
  Tensor f(DType::kF32, {m, k});
  FillNormal(f);
  Tensor w(dt, {m, k});
  for (int64_t r = 0; r < m; ++r)
    quant::QuantizeRow(dt, f.data<float>() + r * k, w.view().row_ptr(r), k);
  return w;
}

TEST(BatchInvariance, MatmulRowsDoNotDependOnTheBatch) {
  PG_SEED_TRACE();
  // SmolLM2's k/v projection, and an awkward wide one.
  for (auto [k, m] : {std::pair<int64_t, int64_t>{576, 192}, {160, 1111}})
  for (DType dt : {DType::kQ4_1, DType::kQ8_0, DType::kQ4_0, DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(fmt::format("{} k={} m={}", Name(dt), k, m));
    Tensor w = QuantizedWeight(dt, m, k);
    const int64_t max_n = 70;
    Tensor x(DType::kF32, {max_n, k});
    FillNormal(x);
    // Each row alone.
    Tensor alone(DType::kF32, {max_n, m});
    for (int64_t r = 0; r < max_n; ++r)
      Matmul({.x = x.view().Slice0(r, 1), .w = w.view(), .out = alone.view().Slice0(r, 1)});
    for (int64_t n : {2, 3, 7, 12, 16, 17, 19, 33, 64, 70}) {
      Tensor out(DType::kF32, {n, m});
      Matmul({.x = x.view().Slice0(0, n), .w = w.view(), .out = out.view()});
      for (int64_t r = 0; r < n; ++r)
        ASSERT_EQ(std::memcmp(out.data<float>() + r * m, alone.data<float>() + r * m, size_t(m) * 4), 0)
            << "row " << r << " of a batch of " << n << " differs from the row alone";
    }
  }
}

}  // namespace
}  // namespace pg::ops::testing
