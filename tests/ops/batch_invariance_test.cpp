// Batch invariance: what the dispatcher computes for one row must not depend on which other
// rows share the batch. The engine relies on it — a request gives the same greedy tokens alone
// or batched with others (docs/design/engine.md) — so each row's result must be BITWISE equal
// whether it runs alone or inside batches of every size (the decode GEMV sizes, the GEMV/GEMM
// boundary, prefill sizes).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "core/quant.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ops.h"
#include "kernels/registry.h"
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

// The CPU kernels Matmul may choose: the best this CPU runs, and cpu_avx2_q8 (what CPUs
// without AVX-512 VNNI run) under a kernel-priority cap. Restores the cap when it ends.
struct KernelCaps {
  std::vector<int> caps{std::numeric_limits<int>::max(), kPriorityCpuAvx2};
  ~KernelCaps() { SetMaxKernelPriority(std::numeric_limits<int>::max()); }
};

TEST(BatchInvariance, MatmulRowsDoNotDependOnTheBatch) {
  PG_SEED_TRACE();
  KernelCaps caps;
  for (int cap : caps.caps)
  // SmolLM2's k/v projection, and an awkward wide one.
  for (auto [k, m] : {std::pair<int64_t, int64_t>{576, 192}, {160, 1111}})
  for (DType dt : {DType::kQ4_1, DType::kQ8_0, DType::kQ4_0, DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(fmt::format("{} k={} m={} kernel cap {}", Name(dt), k, m, cap));
    SetMaxKernelPriority(cap);
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

// The interleaved CPU copies of Q4_0 / Q4_1 weights (RepackRows4) must give every row the
// bits of the source matrix, alone or batched: they are the same model. Odd block counts (k =
// 160: 5 blocks) take the layout's tail.
TEST(BatchInvariance, Rows4RepackGivesTheSourceBits) {
  PG_SEED_TRACE();
  KernelCaps caps;
  for (int cap : caps.caps)
  for (auto [k, m] : {std::pair<int64_t, int64_t>{576, 192}, {160, 1112}, {2048, 768}})
  for (DType dt : {DType::kQ4_0, DType::kQ4_1}) {
    SCOPED_TRACE(fmt::format("{} k={} m={} kernel cap {}", Name(dt), k, m, cap));
    SetMaxKernelPriority(cap);
    Tensor w = QuantizedWeight(dt, m, k);
    if (!cpu::CanRepackRows4(w.view()))
      GTEST_SKIP() << "this CPU has no AVX2: the interleaved layout is never made here";
    Tensor w4 = cpu::RepackRows4(w.view());
    ASSERT_EQ(w4.nbytes(), w.nbytes());
    for (int64_t n : {1, 2, 3, 7, 16, 17, 33}) {
      Tensor x(DType::kF32, {n, k}), want(DType::kF32, {n, m}), got(DType::kF32, {n, m});
      FillNormal(x);
      Matmul({.x = x.view(), .w = w.view(), .out = want.view()});
      Matmul({.x = x.view(), .w = w4.view(), .out = got.view()});
      ASSERT_EQ(std::memcmp(want.data<float>(), got.data<float>(), size_t(n * m) * 4), 0)
          << "n = " << n;
    }
  }
}

// cpu_avx2_q8's Q4 dot products through AVX-VNNI (Intel laptops, Zen 5) must give the bits of
// the plain AVX2 instructions: a model gives the same tokens on both kinds of machine.
TEST(BatchInvariance, AvxVnniGivesTheAvx2Bits) {
  PG_SEED_TRACE();
  if (!cpu::Features().avx_vnni) GTEST_SKIP() << "this CPU has no AVX-VNNI";
  KernelCaps caps;
  SetMaxKernelPriority(kPriorityCpuAvx2);
  struct Restore {
    ~Restore() { cpu::UseAvxVnniForQ4(true); }
  } restore;
  for (auto [k, m] : {std::pair<int64_t, int64_t>{576, 192}, {160, 1111}, {2048, 768}})
  for (DType dt : {DType::kQ4_0, DType::kQ4_1})
  for (bool packed : {false, true}) {
    SCOPED_TRACE(fmt::format("{} k={} m={} packed {}", Name(dt), k, m, packed));
    Tensor w = QuantizedWeight(dt, m, k);
    if (packed && !cpu::CanRepackRows4(w.view())) continue;  // m % 4 != 0
    if (packed) w = cpu::RepackRows4(w.view());
    for (int64_t n : {1, 2, 3, 16}) {
      Tensor x(DType::kF32, {n, k}), plain(DType::kF32, {n, m}), vnni(DType::kF32, {n, m});
      FillNormal(x);
      cpu::UseAvxVnniForQ4(false);
      Matmul({.x = x.view(), .w = w.view(), .out = plain.view()});
      cpu::UseAvxVnniForQ4(true);
      Matmul({.x = x.view(), .w = w.view(), .out = vnni.view()});
      ASSERT_EQ(std::memcmp(plain.data<float>(), vnni.data<float>(), size_t(n * m) * 4), 0)
          << "n = " << n;
    }
  }
}

}  // namespace
}  // namespace pg::ops::testing
