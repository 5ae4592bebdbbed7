// Shared by the MoE op harness files (moe_ops_test.cpp: experts; moe_router_test.cpp:
// router): the device mirrors of the MoE params (device_mirror.h; found by RunBackend through
// ADL), a Gaussian f32 tensor and routing logits with an unambiguous order.
#pragma once

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

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

}  // namespace pg::ops::testing
