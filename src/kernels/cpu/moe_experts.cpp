// CPU backend of MoeExperts: routes are sorted by expert, each hit expert runs once over all
// its rows (gather -> gate/up matmuls -> SwiGLU -> down matmul -> weighted scatter-add), so a
// weight panel is read once per batch however many tokens chose it. The matmuls go through
// ops::Matmul (the registry's fastest CPU kernel for the weights' dtype), or, where the VNNI
// kernel takes them all, as one pool dispatch per phase (gate + up of every hit expert, then
// every down) instead of 24 a layer for a token's 8 experts: Qwen3-30B-A3B's shapes (q4_0,
// 8 layers, 2 threads) decode 4.6 % faster (median of 6 alternating pairs, docs/PERF.md).
#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernel_util.h"
#include "kernels/ops.h"
#include "kernels/ref/moe_kernels.h"

namespace pg::ops::cpu {
namespace {

// Grow-only per-thread scratch (no allocation once warm). Rows are route-ordered: the hit
// experts' rows follow each other (expert e's rows at [counts[e], counts[e + 1])).
struct Scratch {
  std::vector<float> xs, gate, up, act, down;
  std::vector<int32_t> order, counts;
  std::vector<MatmulParams> mm;
  void Grow(std::vector<float>& v, int64_t n) {
    if (int64_t(v.size()) < n) v.resize(size_t(n));
  }
};

// Runs independent matmuls: in one pool dispatch when the kernel Matmul would choose (VNNI,
// else AVX2 for Q4 weights) takes them all, with the same row arithmetic; else one Matmul each.
void MatmulAll(std::span<const MatmulParams> ps) {
  bool vnni = true, avx2 = true;
  for (const MatmulParams& p : ps) {
    vnni = vnni && GemvQuantVnni512Takes(p);
    avx2 = avx2 && GemvQ4Avx2Takes(p);
  }
  if (vnni) return GemvQuantVnni512Many(ps);
  if (avx2) return GemvQ4Avx2Many(ps);
  for (const MatmulParams& p : ps) Matmul(p);
}

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
  if (routes == 0) return;
  s.order.resize(size_t(routes));
  {
    std::vector<int32_t> fill(s.counts.begin(), s.counts.end() - 1);
    for (int64_t r = 0; r < n * k; ++r)
      if (ids[r] >= 0) s.order[size_t(fill[size_t(ids[r])]++)] = int32_t(r);
  }
  s.Grow(s.xs, routes * h);
  s.Grow(s.gate, routes * inter);
  s.Grow(s.up, routes * inter);
  s.Grow(s.act, routes * inter);
  s.Grow(s.down, routes * h);
  for (int64_t i = 0; i < routes; ++i)
    std::memcpy(s.xs.data() + i * h, detail::RowF32(p.x, s.order[size_t(i)] / k), size_t(h) * 4);
  auto rows = [](std::vector<float>& v, int64_t begin, int64_t m, int64_t cols) {
    return TensorView::Contiguous(v.data() + begin * cols, DType::kF32, {m, cols});
  };
  // Phase 1: every hit expert's gate and up; phase 2: SwiGLU over all routes; phase 3: every
  // hit expert's down. Each matmul covers that expert's rows only.
  s.mm.clear();
  for (int e = 0; e < num_experts; ++e) {
    const int64_t begin = s.counts[size_t(e)], m = s.counts[size_t(e) + 1] - begin;
    if (m == 0) continue;
    const MoeExpertWeights& w = p.experts[size_t(e)];
    const TensorView xs = rows(s.xs, begin, m, h);
    s.mm.push_back({.x = xs, .w = w.gate, .out = rows(s.gate, begin, m, inter), .w_scale = w.gate_scale});
    s.mm.push_back({.x = xs, .w = w.up, .out = rows(s.up, begin, m, inter), .w_scale = w.up_scale});
  }
  MatmulAll(s.mm);
  SwiGlu({.gate = rows(s.gate, 0, routes, inter), .up = rows(s.up, 0, routes, inter),
          .out = rows(s.act, 0, routes, inter)});
  s.mm.clear();
  for (int e = 0; e < num_experts; ++e) {
    const int64_t begin = s.counts[size_t(e)], m = s.counts[size_t(e) + 1] - begin;
    if (m == 0) continue;
    const MoeExpertWeights& w = p.experts[size_t(e)];
    s.mm.push_back({.x = rows(s.act, begin, m, inter), .w = w.down,
                    .out = rows(s.down, begin, m, h), .w_scale = w.down_scale});
  }
  MatmulAll(s.mm);
  for (int64_t i = 0; i < routes; ++i) {
    const int64_t r = s.order[size_t(i)], t = r / k, j = r % k;
    const float rw = detail::RowF32(p.topk_weights, t)[j];
    float* out = detail::RowF32(p.out, t);
    const float* y = s.down.data() + i * h;
    for (int64_t c = 0; c < h; ++c) out[c] += rw * y[c];
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
