// FusedMatmul (ops_fused.h): every backend against the reference, which is the composition
// RmsNorm -> Matmul -> SwiGlu of the reference kernels. Cases cover the fused CUDA kernel's
// range (n <= 4, k % 8 == 0, with and without norm / swiglu / bias, Llama's k = 4096), the
// fp8 ring kernel's (fp8 e4m3 weights, n <= 8, k % 64 == 0) and the shapes both refuse (n > 8,
// k % 8 != 0), which the composed backends run.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/quant.h"
#include "kernels/ops_fused.h"
#include "op_test_util.h"

namespace pg::ops::testing {
namespace {

struct Case {
  int64_t n, k, m;
  bool norm, swiglu, bias;
  DType dt = DType::kBF16;
  bool accumulate = false;
  std::string Name() const {
    return fmt::format("{} n={} k={} m={}{}{}{}{}", pg::Name(dt), n, k, m, norm ? " norm" : "",
                       swiglu ? " swiglu" : "", bias ? " bias" : "", accumulate ? " accumulate" : "");
  }
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (int64_t n : {1, 3, 4, 5})
    for (bool norm : {true, false})
      for (bool swiglu : {true, false}) {
        cases.push_back({n, 96, swiglu ? 130 : 111, norm, swiglu, n == 3});
        cases.push_back({n, 4096, swiglu ? 64 : 37, norm, swiglu, false});
      }
  cases.push_back({2, 100, 70, true, true, true});    // k % 8 != 0: composed on CUDA
  cases.push_back({19, 160, 66, true, true, false});  // prefill rows: composed (cuBLASLt)
  cases.push_back({1, 128, 96, true, true, false, DType::kF8E4M3});  // fp8: fused (ring), composed
  for (int64_t n : {1, 3, 8}) {  // fp8 in the ring kernel's range (cuda_fp8_ring: n <= 8, k % 64 == 0)
    // (swiglu: n x 65 outputs, the sample size kBf16SwiGlu's ~10x-rms maximum holds for)
    cases.push_back({n, 4096, 2 * 65, true, true, n == 3, DType::kF8E4M3});
    cases.push_back({n, 576, 333, true, false, true, DType::kF8E4M3});
  }
  // Accumulate: the MoE o projections at one token (Qwen3-30B-A3B 2048 x 4096, DeepSeek-V2-Lite
  // 2048 x 2048: the one-row ring kernel), 2 rows of 96 outputs, and with the norm and bias.
  cases.push_back({1, 4096, 2048, false, false, false, DType::kBF16, true});
  cases.push_back({1, 2048, 2048, false, false, false, DType::kBF16, true});
  cases.push_back({2, 256, 96, false, false, false, DType::kBF16, true});
  cases.push_back({3, 128, 40, true, false, true, DType::kBF16, true});
  return cases;
}

// Device tolerances (relative to rms(ref), ref in f32 without intermediate rounding):
//  * SwiGLU outputs round three times in a row on a bf16 device (the projection's gate and up,
//    then the product; 2^-9 relative each) and reach ~10x their rms (a product of two normal
//    variables), so the worst element may be off by ~3 * 2^-9 * 10 = 0.06 of rms: 0.08;
//    nmse stays ~1e-5 (bound 1e-4).
//  * fp8 weights (cuda_fp8_gemv): the weights are exact e4m3 values on both sides, the rest as
//    bf16; kept at the Matmul harness's fp8 bound. The fused ring kernel (cuda_fp8_ring) takes
//    bf16 activations as they are and rounds where the bf16 kernel does: the bf16 bounds.
constexpr Tolerance kBf16SwiGlu{0.08, 1e-4};
constexpr Tolerance kFp8Weights{0.25, 3e-3};

// Backends whose Matmul step quantizes activations to int8 blocks ("*_q8", CPU) round more.
Tolerance HostTolerance(const FusedMatmulParams& p, int64_t outputs) {
  MatmulParams mp{.x = p.x, .w = p.w, .out = p.swiglu ? p.projected : p.out, .w_scale = p.w_scale};
  const KernelImpl<MatmulParams>* mm = Registry::Global().Selected(mp);
  if (mm && mm->backend.ends_with("_q8")) {
    const double widen = std::max(1.0, 32.0 / double(std::max<int64_t>(outputs, 1)));
    return {0.06 * std::sqrt(widen), 2e-4 * widen};
  }
  return {1e-4, 1e-9};  // float summation order (Matmul), few-ulp RmsNorm / SwiGlu
}

TEST(FusedMatmulOp, EveryBackendMatchesTheComposition) {
  PG_SEED_TRACE();
  Coverage cov;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.Name());
    Tensor x(DType::kF32, {c.n, c.k}), nw(DType::kF32, {c.k}), bias(DType::kF32, {c.m});
    FillNormal(x, 0.3f, 2.0f);  // mean off zero: a missing norm is visible
    FillUniform(nw, 0.5f, 1.5f);
    FillNormal(bias);
    RoundToBf16(x);  // bf16-representable inputs: a device differs by arithmetic only
    Tensor wf(DType::kF32, {c.m, c.k});
    FillNormal(wf, 0.0f, 0.05f);
    Tensor w(c.dt, {c.m, c.k}), w_scale;
    for (int64_t r = 0; r < c.m; ++r)
      quant::QuantizeRow(c.dt, wf.data<float>() + r * c.k, w.view().row_ptr(r), c.k);
    if (c.dt == DType::kF8E4M3) {
      w_scale = Tensor(DType::kF32, {1});
      w_scale.data<float>()[0] = 1.0f;
    }
    const int64_t out_m = c.swiglu ? c.m / 2 : c.m;
    Tensor normed(DType::kF32, {c.n, c.k}), projected(DType::kF32, {c.n, c.m});
    // Accumulate: out starts from a bf16-representable residual.
    Tensor out0(DType::kF32, {c.n, out_m});
    FillNormal(out0, 0.1f, 1.0f);
    RoundToBf16(out0);
    auto params = [&](const Tensor& out) {
      FusedMatmulParams p;
      p.x = x.view();
      if (c.norm) p.norm_weight = nw.view();
      p.eps = 1e-5f;
      p.w = w.view();
      if (c.bias) p.bias = bias.view();
      if (c.dt == DType::kF8E4M3) p.w_scale = w_scale.view();
      p.swiglu = c.swiglu;
      p.out = out.view();
      p.normed = normed.view();
      p.projected = projected.view();
      p.accumulate = c.accumulate;
      return p;
    };
    auto fresh_out = [&] {
      Tensor o(DType::kF32, {c.n, out_m});
      std::copy_n(out0.data<float>(), o.numel(), o.data<float>());
      return o;
    };
    Tensor ref_out = fresh_out();
    RunWith(RefImpl<FusedMatmulParams>(), params(ref_out));
    for (const KernelImpl<FusedMatmulParams>* k : Backends<FusedMatmulParams>()) {
      Tensor out = fresh_out();
      const FusedMatmulParams p = params(out);
      if (!RunBackend(*k, p)) continue;
      cov.Ran(k->backend);
      const bool fp8_loose = c.dt == DType::kF8E4M3 && k->backend != "cuda_fp8_ring";
      const Tolerance tol = !OnDevice(*k)              ? HostTolerance(p, out.numel())
                            : fp8_loose                ? kFp8Weights
                            : c.swiglu                 ? kBf16SwiGlu
                                                       : kBf16;
      ExpectClose(ref_out.data<float>(), out.data<float>(), out.numel(), tol,
                  k->backend + " " + c.Name());
    }
  }
  cov.Check<FusedMatmulParams>();
}

TEST(FusedMatmulOp, RejectsAccumulateWithSwiGlu) {
  const int64_t n = 1, k = 16, m = 8;
  Tensor x(DType::kF32, {n, k}), w(DType::kF32, {m, k}), out(DType::kF32, {n, m / 2});
  Tensor projected(DType::kF32, {n, m});
  FillNormal(x);
  FillNormal(w);
  FusedMatmulParams p{.x = x.view(), .w = w.view(), .swiglu = true, .out = out.view(),
                      .projected = projected.view()};
  EXPECT_NO_THROW(FusedMatmul(p));
  p.accumulate = true;
  EXPECT_THROW(FusedMatmul(p), Error);  // accumulate with swiglu
}

// The composition it stands for: with bias and swiglu, out differs from silu(gate) * up of a
// separately computed projection only by rounding (a wrong gate/up split or a skipped norm
// is off by O(1)).
TEST(FusedMatmulOp, ReferenceIsTheComposition) {
  PG_SEED_TRACE();
  const int64_t n = 2, k = 64, m = 20;
  Tensor x(DType::kF32, {n, k}), nw(DType::kF32, {k}), w(DType::kF32, {m, k});
  FillNormal(x, 1.0f, 1.0f);
  FillUniform(nw, 0.5f, 1.5f);
  FillNormal(w);
  Tensor normed(DType::kF32, {n, k}), projected(DType::kF32, {n, m}), out(DType::kF32, {n, m / 2});
  RunWith(RefImpl<FusedMatmulParams>(),
          FusedMatmulParams{.x = x.view(), .norm_weight = nw.view(), .w = w.view(), .swiglu = true,
                            .out = out.view(), .normed = normed.view(), .projected = projected.view()});
  // By hand: norm, projection, silu(g) * u in double.
  for (int64_t r = 0; r < n; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < k; ++i) ss += double(x.data<float>()[r * k + i]) * x.data<float>()[r * k + i];
    const double inv = 1.0 / std::sqrt(ss / double(k) + 1e-5);
    for (int64_t j = 0; j < m / 2; ++j) {
      double g = 0, u = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double h = x.data<float>()[r * k + i] * inv * nw.data<float>()[i];
        g += h * w.data<float>()[j * k + i];
        u += h * w.data<float>()[(j + m / 2) * k + i];
      }
      const double want = g / (1.0 + std::exp(-g)) * u;
      EXPECT_NEAR(out.data<float>()[r * (m / 2) + j], want, 1e-4 * (1.0 + std::fabs(want)))
          << "row " << r << " col " << j;
    }
  }
}

}  // namespace
}  // namespace pg::ops::testing
