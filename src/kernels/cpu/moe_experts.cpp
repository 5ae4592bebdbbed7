// CPU backend of MoeExperts: routes are sorted by expert, each hit expert runs once over all
// its rows (gather -> gate/up matmuls -> SwiGLU -> down matmul -> weighted scatter-add), so a
// weight panel is read once per batch however many tokens chose it. The matmuls go through
// ops::Matmul (the registry's fastest CPU kernel for the weights' dtype).
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/kernel_util.h"
#include "kernels/ops.h"
#include "kernels/ref/moe_kernels.h"

namespace pg::ops::cpu {
namespace {

// Grow-only per-thread scratch (no allocation once warm).
struct Scratch {
  std::vector<float> xs, gate, up, act, down;
  std::vector<int32_t> order, counts;
  void Grow(std::vector<float>& v, int64_t n) {
    if (int64_t(v.size()) < n) v.resize(size_t(n));
  }
};

void CpuMoeExperts(const MoeExpertsParams& p) {
  if (p.route) ops::MoeRouter(*p.route);  // ops_moe.h: the routing runs first, as MoeRouter
  thread_local Scratch s;
  const int64_t n = p.x.dim(0), h = p.x.dim(1), k = p.topk_ids.dim(1);
  const int64_t inter = p.experts[0].gate.dim(0);
  const int num_experts = int(p.experts.size());
  const int32_t* ids = p.topk_ids.as<int32_t>();
  if (!p.accumulate)
    for (int64_t t = 0; t < n; ++t) std::memset(detail::RowF32(p.out, t), 0, size_t(h) * 4);
  // Counting sort of the routes (t * k + j) by expert.
  s.counts.assign(size_t(num_experts) + 1, 0);
  for (int64_t r = 0; r < n * k; ++r)
    if (ids[r] >= 0) ++s.counts[size_t(ids[r]) + 1];
  for (int e = 0; e < num_experts; ++e) s.counts[size_t(e) + 1] += s.counts[size_t(e)];
  const int64_t routes = s.counts[size_t(num_experts)];
  s.order.resize(size_t(routes));
  {
    std::vector<int32_t> fill(s.counts.begin(), s.counts.end() - 1);
    for (int64_t r = 0; r < n * k; ++r)
      if (ids[r] >= 0) s.order[size_t(fill[size_t(ids[r])]++)] = int32_t(r);
  }
  int64_t max_rows = 0;
  for (int e = 0; e < num_experts; ++e)
    max_rows = std::max<int64_t>(max_rows, s.counts[size_t(e) + 1] - s.counts[size_t(e)]);
  s.Grow(s.xs, max_rows * h);
  s.Grow(s.gate, max_rows * inter);
  s.Grow(s.up, max_rows * inter);
  s.Grow(s.act, max_rows * inter);
  s.Grow(s.down, max_rows * h);
  for (int e = 0; e < num_experts; ++e) {
    const int64_t begin = s.counts[size_t(e)], m = s.counts[size_t(e) + 1] - begin;
    if (m == 0) continue;
    for (int64_t i = 0; i < m; ++i) {
      const int64_t t = s.order[size_t(begin + i)] / k;
      std::memcpy(s.xs.data() + i * h, detail::RowF32(p.x, t), size_t(h) * 4);
    }
    auto view = [m](std::vector<float>& v, int64_t cols) {
      return TensorView::Contiguous(v.data(), DType::kF32, {m, cols});
    };
    const MoeExpertWeights& w = p.experts[size_t(e)];
    TensorView xs = view(s.xs, h), g = view(s.gate, inter), u = view(s.up, inter),
               a = view(s.act, inter), d = view(s.down, h);
    Matmul({.x = xs, .w = w.gate, .out = g, .w_scale = w.gate_scale});
    Matmul({.x = xs, .w = w.up, .out = u, .w_scale = w.up_scale});
    SwiGlu({.gate = g, .up = u, .out = a});
    Matmul({.x = a, .w = w.down, .out = d, .w_scale = w.down_scale});
    for (int64_t i = 0; i < m; ++i) {
      const int64_t r = s.order[size_t(begin + i)], t = r / k, j = r % k;
      const float rw = detail::RowF32(p.topk_weights, t)[j];
      float* out = detail::RowF32(p.out, t);
      const float* y = s.down.data() + i * h;
      for (int64_t c = 0; c < h; ++c) out[c] += rw * y[c];
    }
  }
}

// The shared expert (MoeExpertsParams::shared) is the reference's (and CUDA's) only.
bool CpuMoeExpertsSupports(const MoeExpertsParams& p) { return !p.shared.gate.data; }

}  // namespace

void RegisterMoe(Registry& r) {
  r.Register(KernelImpl<MoeExpertsParams>{"cpu_sorted", Device::kCpu, kPriorityCpuGeneric,
                                          &CpuMoeExpertsSupports, &CpuMoeExperts});
}

}  // namespace pg::ops::cpu
