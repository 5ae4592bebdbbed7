// Reference MoE router and experts (ops_moe.h): plain loops, double accumulation. The ground
// truth the other backends are tested against.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/quant.h"
#include "kernels/kernel_util.h"
#include "kernels/ref/moe_kernels.h"

namespace pg::ops::ref {
namespace {

using detail::RowF32;

// Indices of the k largest values, descending; ties keep the lower index first.
std::vector<int> TopK(const std::vector<double>& v, const std::vector<bool>& eligible, int k) {
  std::vector<int> idx;
  for (int i = 0; i < int(v.size()); ++i)
    if (eligible[size_t(i)]) idx.push_back(i);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int a, int b) { return v[size_t(a)] > v[size_t(b)]; });
  idx.resize(size_t(std::min<int>(k, int(idx.size()))));
  return idx;
}

double Silu(double g) { return g / (1.0 + std::exp(-g)); }

// Row r of weight w dequantized to f32, fp8 scales applied (MoeExpertWeights).
void WeightRow(const TensorView& w, const TensorView& scale, int64_t r, float* row) {
  const int64_t cols = w.dim(1);
  quant::DequantizeRow(w.dtype, w.row_ptr(r), row, cols);
  if (!scale.data) return;
  const float* s = scale.as<float>();
  if (scale.ndim == 1) {
    const float v = scale.dim(0) == 1 ? s[0] : s[r];
    for (int64_t c = 0; c < cols; ++c) row[c] *= v;
  } else {  // 128x128 blocks
    const float* srow = s + (r / 128) * scale.dim(1);
    for (int64_t c = 0; c < cols; ++c) row[c] *= srow[c / 128];
  }
}

}  // namespace

void MoeRouter(const MoeRouterParams& p) {
  const int64_t n = p.logits.dim(0);
  const int num_experts = int(p.logits.dim(1)), k = int(p.topk_ids.dim(1));
  if (p.x.data) {  // fused router matmul: logits = x · router^T, as the reference Matmul
    const int64_t h = p.x.dim(1);
    // Fused RMSNorm first: the reference RmsNorm kernel itself, into `normed`.
    if (p.norm_weight.data)
      Registry::Global().table<RmsNormParams>().Find("ref")->run(
          {.x = p.x, .weight = p.norm_weight, .out = p.normed, .residual = p.residual,
           .eps = p.norm_eps});
    const TensorView& in = p.norm_weight.data ? p.normed : p.x;
    std::vector<float> wrow(static_cast<size_t>(h));
    for (int e = 0; e < num_experts; ++e) {
      WeightRow(p.router, TensorView{}, e, wrow.data());
      for (int64_t t = 0; t < n; ++t) {
        const float* x = RowF32(in, t);
        double acc = 0;
        for (int64_t c = 0; c < h; ++c) acc += double(x[c]) * double(wrow[size_t(c)]);
        RowF32(p.logits, t)[e] = float(acc);
      }
    }
  }
  const int per_group = num_experts / p.num_groups;
  std::vector<double> score(static_cast<size_t>(num_experts)), choice(static_cast<size_t>(num_experts));
  std::vector<double> group_score(static_cast<size_t>(p.num_groups));
  for (int64_t t = 0; t < n; ++t) {
    const float* lg = RowF32(p.logits, t);
    if (p.scoring == MoeScoring::kSoftmax) {
      double mx = -INFINITY, sum = 0;
      for (int e = 0; e < num_experts; ++e) mx = std::max(mx, double(lg[e]));
      for (int e = 0; e < num_experts; ++e) sum += (score[size_t(e)] = std::exp(lg[e] - mx));
      for (double& s : score) s /= sum;
    } else {
      for (int e = 0; e < num_experts; ++e) score[size_t(e)] = 1.0 / (1.0 + std::exp(-double(lg[e])));
    }
    for (int e = 0; e < num_experts; ++e)
      choice[size_t(e)] = score[size_t(e)] + (p.bias.data ? double(p.bias.as<float>()[e]) : 0.0);
    std::vector<bool> eligible(size_t(num_experts), true);
    if (p.num_groups > 1 && p.topk_groups < p.num_groups) {
      // A group's score: the sum of its best two choice scores.
      for (int g = 0; g < p.num_groups; ++g) {
        std::vector<double> members(choice.begin() + g * per_group,
                                    choice.begin() + (g + 1) * per_group);
        std::sort(members.rbegin(), members.rend());
        group_score[size_t(g)] = members[0] + (per_group > 1 ? members[1] : 0.0);
      }
      std::vector<int> groups =
          TopK(group_score, std::vector<bool>(size_t(p.num_groups), true), p.topk_groups);
      std::fill(eligible.begin(), eligible.end(), false);
      for (int g : groups)
        for (int e = g * per_group; e < (g + 1) * per_group; ++e) eligible[size_t(e)] = true;
    }
    std::vector<int> chosen = TopK(choice, eligible, k);
    double sum = 0;
    for (int e : chosen) sum += score[size_t(e)];
    int32_t* ids = p.topk_ids.as<int32_t>() + t * k;
    float* w = RowF32(p.topk_weights, t);
    for (int j = 0; j < k; ++j) {
      ids[j] = chosen[size_t(j)];
      double wj = score[size_t(chosen[size_t(j)])];
      if (p.renormalize) wj /= sum + 1e-20;
      w[j] = float(wj * p.scaling);
    }
  }
}

namespace {

// acc[0, h) += route_w * expert(x) for one expert (gate/up SwiGLU, then down), in double.
void AddExpert(const MoeExpertWeights& w, const float* x, int64_t h, double route_w,
               std::vector<float>& wrow, std::vector<double>& act, std::vector<double>& acc) {
  const int64_t inter = w.gate.dim(0);
  if (int64_t(act.size()) < inter) act.resize(size_t(inter));
  if (int64_t(wrow.size()) < std::max(h, inter)) wrow.resize(size_t(std::max(h, inter)));
  for (int64_t i = 0; i < inter; ++i) {
    double g = 0, u = 0;
    WeightRow(w.gate, w.gate_scale, i, wrow.data());
    for (int64_t c = 0; c < h; ++c) g += double(x[c]) * wrow[size_t(c)];
    WeightRow(w.up, w.up_scale, i, wrow.data());
    for (int64_t c = 0; c < h; ++c) u += double(x[c]) * wrow[size_t(c)];
    act[size_t(i)] = Silu(g) * u;
  }
  for (int64_t o = 0; o < h; ++o) {
    WeightRow(w.down, w.down_scale, o, wrow.data());
    double y = 0;
    for (int64_t i = 0; i < inter; ++i) y += act[size_t(i)] * wrow[size_t(i)];
    acc[size_t(o)] += route_w * y;
  }
}

}  // namespace

void MoeExperts(const MoeExpertsParams& p) {
  if (p.route) ref::MoeRouter(*p.route);  // ops_moe.h: the routing runs first, as MoeRouter
  const int64_t n = p.x.dim(0), h = p.x.dim(1), k = p.topk_ids.dim(1);
  std::vector<float> wrow;
  std::vector<double> act, acc(static_cast<size_t>(h));
  for (int64_t t = 0; t < n; ++t) {
    const float* x = RowF32(p.x, t);
    std::fill(acc.begin(), acc.end(), 0.0);
    if (p.shared.gate.data) AddExpert(p.shared, x, h, 1.0, wrow, act, acc);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = p.topk_ids.as<int32_t>()[t * k + j];
      if (e < 0) continue;
      AddExpert(p.experts[size_t(e)], x, h, RowF32(p.topk_weights, t)[j], wrow, act, acc);
    }
    float* out = RowF32(p.out, t);
    for (int64_t o = 0; o < h; ++o)
      out[o] = p.accumulate ? float(double(out[o]) + acc[size_t(o)]) : float(acc[size_t(o)]);
  }
}

}  // namespace pg::ops::ref
