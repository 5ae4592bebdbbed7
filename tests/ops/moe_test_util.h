// Shared by the MoE op harness files (moe_ops_test.cpp: experts; moe_router_test.cpp:
// router): the device mirrors of the MoE params (device_mirror.h; found by RunBackend through
// ADL), a Gaussian f32 tensor and routing logits with an unambiguous order.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/quant.h"
#include "kernels/ops_moe.h"
#include "op_test_util.h"

#if defined(PEREGRINE_HAVE_CUDA)
#include <deque>
#include <vector>
#endif

namespace pg::ops::testing {

#if defined(PEREGRINE_HAVE_CUDA)
// Device mirrors of the MoE params (device_mirror.h; found by RunBackend through ADL).
// Router logits go over as f32 (the kernel takes f32 or bf16; bf16: MoeRouterOp.CudaBf16Logits).
inline MoeRouterParams Mirror(DeviceMirror& m, const MoeRouterParams& p) {
  MoeRouterParams d = p;
  // Fused router matmul: x as a bf16 activation, the router's bytes, the logits an output.
  d.logits = p.x.data ? m.RawOut(p.logits) : m.Raw(p.logits);
  d.x = m.Act(p.x, false);
  d.router = m.Raw(p.router);
  d.norm_weight = m.Raw(p.norm_weight);
  d.normed = m.Act(p.normed, true);
  d.residual = m.Act(p.residual, true);
  d.bias = m.Raw(p.bias);
  d.topk_ids = m.RawOut(p.topk_ids);
  d.topk_weights = m.RawOut(p.topk_weights);
  return d;
}
inline MoeExpertsParams Mirror(DeviceMirror& m, const MoeExpertsParams& p) {
  static std::deque<std::vector<MoeExpertWeights>> keep;  // the device views' span storage
  std::vector<MoeExpertWeights>& ex = keep.emplace_back();
  for (const MoeExpertWeights& w : p.experts)
    ex.push_back({m.Raw(w.gate), m.Raw(w.up), m.Raw(w.down), m.Raw(w.gate_scale),
                  m.Raw(w.up_scale), m.Raw(w.down_scale)});
  MoeExpertsParams d = p;
  const MoeExpertWeights& sh = p.shared;
  d.shared = {m.Raw(sh.gate), m.Raw(sh.up), m.Raw(sh.down), m.Raw(sh.gate_scale),
              m.Raw(sh.up_scale), m.Raw(sh.down_scale)};
  d.x = m.Act(p.x, false);
  d.topk_ids = m.Raw(p.topk_ids);
  d.topk_weights = m.Raw(p.topk_weights);
  d.experts = ex;
  d.out = m.Act(p.out, true);
  d.l2_after = m.Raw(p.l2_after);
  if (p.route) {
    // The fused routing's params: one per thread, valid until the next mirror (RunBackend runs
    // the backend right after). Its ids / weights / normed alias the op's (one device copy).
    thread_local MoeRouterParams route;
    route = Mirror(m, *p.route);
    d.route = &route;
  }
  return d;
}
#endif


inline Tensor F32(std::initializer_list<int64_t> shape, float stddev = 1.0f) {
  Tensor t(DType::kF32, shape);
  FillNormal(t, 0.0f, stddev);
  return t;
}

// Logits whose order is unambiguous in f32 (a shuffled ramp, spacing 6 / experts, plus noise
// well below it), so every backend must choose the reference's experts exactly.
inline Tensor RampLogits(int64_t n, int e) {
  Tensor t(DType::kF32, {n, int64_t(e)});
  std::vector<int> perm(static_cast<size_t>(e));
  std::uniform_real_distribution<float> noise(-0.1f, 0.1f);
  for (int64_t r = 0; r < n; ++r) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), Rng());
    for (int i = 0; i < e; ++i)
      t.data<float>()[r * e + i] = -3.0f + 6.0f * (float(perm[size_t(i)]) + noise(Rng())) / float(e);
  }
  return t;
}

struct ExpertSet {
  std::vector<Tensor> owned;
  std::vector<MoeExpertWeights> views;
};

// ---- experts (moe_ops_test.cpp, moe_route_cluster_test.cpp) ---------------------------------

// fp8 e4m3 scale shapes (MoeExpertWeights): none (other dtypes), [1], [rows], 128x128 blocks.
enum class Fp8Scale { kNone, kTensor, kChannel, kBlock };

// An fp8 e4m3 matrix quantized from f32 `f` with scales of shape `kind` (amax / 448 per scale
// group, times a random factor so scales differ by more than the data).
inline std::pair<Tensor, Tensor> QuantizeFp8(const Tensor& f, Fp8Scale kind) {
  const int64_t rows = f.dim(0), cols = f.dim(1);
  const int64_t br = kind == Fp8Scale::kTensor ? rows : (kind == Fp8Scale::kChannel ? 1 : 128);
  const int64_t bc = kind == Fp8Scale::kBlock ? 128 : cols;
  const int64_t block_shape[2] = {(rows + 127) / 128, (cols + 127) / 128};
  const int64_t vec_shape[1] = {kind == Fp8Scale::kTensor ? 1 : rows};
  Tensor scale = kind == Fp8Scale::kBlock ? Tensor(DType::kF32, block_shape, 2)
                                          : Tensor(DType::kF32, vec_shape, 1);
  const int64_t sc = kind == Fp8Scale::kBlock ? (cols + 127) / 128 : 1;
  for (int64_t r0 = 0; r0 < rows; r0 += br)
    for (int64_t c0 = 0; c0 < cols; c0 += bc) {
      float amax = 1e-6f;
      for (int64_t r = r0; r < std::min(rows, r0 + br); ++r)
        for (int64_t c = c0; c < std::min(cols, c0 + bc); ++c)
          amax = std::max(amax, std::fabs(f.data<float>()[r * cols + c]));
      scale.data<float>()[(r0 / br) * sc + c0 / bc] = amax / 448.0f * float(RandInt(2, 8)) / 4.0f;
    }
  const int64_t q_shape[2] = {rows, cols};
  Tensor q(DType::kF8E4M3, q_shape, 2);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      q.data<uint8_t>()[r * cols + c] =
          F32ToF8E4M3(f.data<float>()[r * cols + c] / scale.data<float>()[(r / br) * sc + c / bc]);
  return {std::move(q), std::move(scale)};
}

inline ExpertSet MakeExperts(int num_experts, int64_t hidden, int64_t inter, DType dt,
                      Fp8Scale kind = Fp8Scale::kBlock) {
  ExpertSet s;
  auto make = [&](int64_t rows, int64_t cols, TensorView* scale) {
    Tensor f = F32({rows, cols}, 0.2f);
    if (dt == DType::kF8E4M3) {
      auto [q, sc] = QuantizeFp8(f, kind);
      s.owned.push_back(std::move(sc));
      *scale = s.owned.back().view();
      s.owned.push_back(std::move(q));
      return s.owned.back().view();
    }
    Tensor q(dt, {rows, cols});
    for (int64_t r = 0; r < rows; ++r)
      quant::QuantizeRow(dt, f.data<float>() + r * cols, q.view().row_ptr(r), cols);
    s.owned.push_back(std::move(q));
    return s.owned.back().view();
  };
  for (int e = 0; e < num_experts; ++e) {
    MoeExpertWeights w;
    w.gate = make(inter, hidden, &w.gate_scale);
    w.up = make(inter, hidden, &w.up_scale);
    w.down = make(hidden, inter, &w.down_scale);
    s.views.push_back(w);
  }
  return s;
}

}  // namespace pg::ops::testing
