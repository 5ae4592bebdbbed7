// The AVX-512 VNNI decode GEMV ("cpu_vnni_q8") keeps Q4_0 / Q4_1 activations at 16 bits
// (|q| <= 127*128 per 32-block), so on those dtypes it must be far closer to ref/ than the
// 8-bit-activation harness tolerance: relative error per element ~1/(2*16256) before the
// k-term sum. Checked on the model's shapes and awkward ones (odd block counts, row counts
// that are not a multiple of the 4-row pass, several activation rows), with fresh random
// data. Q8_0 keeps 8-bit activations and stays under the harness tolerance (matmul_test).
#include <fmt/format.h>

#include "core/quant.h"
#include "kernels/cpu/cpu_features.h"
#include "op_test_util.h"

namespace pg::ops::testing {
namespace {

// 16-bit activations: observed max_rel ~1e-4 on these shapes; 8-bit ones give ~1e-2.
constexpr Tolerance kInt16Act{1e-3, 1e-7};

TEST(GemvPrecision, Q4WithInt16ActivationsIsCloseToReference) {
  PG_SEED_TRACE();
  // Only the VNNI kernel keeps 16-bit activations; without AVX-512 VNNI it is not registered
  // (the AVX2 kernel's 8-bit activations are held to the harness tolerance in matmul_test).
  if (!cpu::Features().vnni) GTEST_SKIP() << "this CPU has no AVX-512 VNNI: cpu_vnni_q8 is not registered here";
  const KernelImpl<MatmulParams>* vnni = Registry::Global().table<MatmulParams>().Find("cpu_vnni_q8");
  ASSERT_NE(vnni, nullptr);
  const int64_t shapes[][3] = {{1, 576, 576},  {1, 576, 1536}, {1, 1536, 576}, {1, 96, 111},
                               {3, 160, 37},   {16, 224, 45},  {5, 32, 7},     {1, 1568, 9}};
  for (DType dt : {DType::kQ4_1, DType::kQ4_0}) {
    for (auto& s : shapes) {
      const int64_t n = s[0], k = s[1], m = s[2];
      SCOPED_TRACE(fmt::format("{} n={} k={} m={}", Name(dt), n, k, m));
      Tensor x(DType::kF32, {n, k}), w(dt, {m, k});
      FillNormal(x);
      // Mix in blocks of very different magnitude (activation outliers, as in real models).
      for (int64_t i = 0; i < x.numel(); i += 97) x.data<float>()[i] *= 30.0f;
      std::vector<float> row(static_cast<size_t>(k));
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (int64_t j = 0; j < m; ++j) {
        for (float& v : row) v = nd(Rng());
        quant::QuantizeRow(dt, row.data(), w.view().row_ptr(j), k);
      }
      Tensor ref(DType::kF32, {n, m}), got(DType::kF32, {n, m});
      RunWith(RefImpl<MatmulParams>(), MatmulParams{x.view(), w.view(), ref.view(), {}, {}, false});
      RunWith(*vnni, MatmulParams{x.view(), w.view(), got.view(), {}, {}, false});
      ExpectClose(ref.data<float>(), got.data<float>(), got.numel(), kInt16Act, "cpu_vnni_q8");
    }
  }
}

}  // namespace
}  // namespace pg::ops::testing
