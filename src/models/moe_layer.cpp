#include "models/moe_layer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "core/status.h"
#include "kernels/ops.h"

namespace pg::models {

MlpWeights LoadMlp(MoeWeights& w, const std::string& p, int64_t hidden, int64_t inter) {
  return {w.Get(p + "gate_proj.weight", {inter, hidden}), w.Get(p + "up_proj.weight", {inter, hidden}),
          w.Get(p + "down_proj.weight", {hidden, inter})};
}

MoeFfnWeights LoadMoeFfn(MoeWeights& w, const std::string& p, const MoeModelConfig& c) {
  const int64_t h = c.base.hidden_size, e = c.num_experts, inter = c.moe_intermediate_size;
  MoeFfnWeights m;
  m.router = w.Get(p + "gate.weight", {e, h});
  if (c.has_score_bias) m.score_bias = w.GetF32(p + "gate.e_score_correction_bias", {e}, 0.0f);
  m.experts.reserve(size_t(e));
  for (int64_t i = 0; i < e; ++i) {
    MlpWeights x = LoadMlp(w, p + "experts." + std::to_string(i) + ".", h, inter);
    m.experts.push_back({x.gate, x.up, x.down});
  }
  if (c.num_shared_experts > 0)
    m.shared = LoadMlp(w, p + "shared_experts.", h, inter * c.num_shared_experts);
  return m;
}

TensorView FfnScratch::F32(int slot, int64_t n, int64_t cols) {
  auto& v = f_[slot];
  if (int64_t(v.size()) < n * cols) v.resize(size_t(n * cols));
  return TensorView::Contiguous(v.data(), DType::kF32, {n, cols});
}

TensorView FfnScratch::I32(int64_t n, int64_t cols) {
  if (int64_t(i_.size()) < n * cols) i_.resize(size_t(n * cols));
  return TensorView::Contiguous(i_.data(), DType::kI32, {n, cols});
}

void RunMlp(const MlpWeights& w, const TensorView& x, const TensorView& out, FfnScratch& s) {
  const int64_t n = x.dim(0), inter = w.inter();
  TensorView g = s.F32(0, n, inter), u = s.F32(1, n, inter), a = s.F32(2, n, inter);
  ops::Matmul({.x = x, .w = w.gate, .out = g});
  ops::Matmul({.x = x, .w = w.up, .out = u});
  ops::SwiGlu({.gate = g, .up = u, .out = a});
  ops::Matmul({.x = a, .w = w.down, .out = out});
}

float RoutingMargin(std::span<const float> logits, const MoeFfnWeights& w,
                    const MoeModelConfig& c) {
  const int64_t ne = int64_t(logits.size());
  std::vector<float> choice(logits.begin(), logits.end());
  if (c.scoring == ops::MoeScoring::kSigmoid) {
    for (float& v : choice) v = 1.0f / (1.0f + std::exp(-v));
  } else {
    const float mx = *std::max_element(choice.begin(), choice.end());
    float sum = 0;
    for (float& v : choice) sum += (v = std::exp(v - mx));
    for (float& v : choice) v /= sum;
  }
  if (w.score_bias.data)
    for (int64_t e = 0; e < ne; ++e) choice[size_t(e)] += w.score_bias.as<float>()[e];
  constexpr float kNone = std::numeric_limits<float>::infinity();
  const int groups = std::max(c.n_group, 1);
  const int64_t per = ne / groups;
  // Group scores: the sum of each group's best two choice scores (its best one if alone).
  std::vector<std::pair<float, int>> gs;
  for (int g = 0; g < groups; ++g) {
    std::vector<float> v(choice.begin() + g * per, choice.begin() + (g + 1) * per);
    std::sort(v.rbegin(), v.rend());
    gs.push_back({per >= 2 ? v[0] + v[1] : v[0], g});
  }
  std::sort(gs.begin(), gs.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  const int kept = std::min(std::max(c.topk_group, 1), groups);
  const float group_margin = groups > kept ? gs[size_t(kept - 1)].first - gs[size_t(kept)].first : kNone;
  std::vector<float> eligible;
  for (int i = 0; i < kept; ++i)
    for (int64_t e = gs[size_t(i)].second * per; e < (gs[size_t(i)].second + 1) * per; ++e)
      eligible.push_back(choice[size_t(e)]);
  std::sort(eligible.rbegin(), eligible.rend());
  const float topk_margin = int64_t(eligible.size()) > c.top_k
                                ? eligible[size_t(c.top_k - 1)] - eligible[size_t(c.top_k)]
                                : kNone;
  return std::min(group_margin, topk_margin);
}

void RunMoeFfn(const MoeFfnWeights& w, const MoeModelConfig& c, const TensorView& x,
               const TensorView& out, FfnScratch& s, float* last_row_margin) {
  const int64_t n = x.dim(0);
  // Slot 3 holds router logits and weights: [n, E] then [n, k] after it.
  TensorView logits = s.F32(3, n, c.num_experts + c.top_k);
  logits = TensorView::Contiguous(logits.data, DType::kF32, {n, c.num_experts});
  TensorView weights = TensorView::Contiguous(logits.as<float>() + n * c.num_experts, DType::kF32,
                                              {n, c.top_k});
  TensorView ids = s.I32(n, c.top_k);
  ops::Matmul({.x = x, .w = w.router, .out = logits});
  ops::MoeRouter({.logits = logits, .bias = w.score_bias, .topk_ids = ids, .topk_weights = weights,
                  .scoring = c.scoring, .num_groups = c.n_group, .topk_groups = c.topk_group,
                  .renormalize = c.norm_topk_prob, .scaling = c.routed_scaling_factor});
  if (last_row_margin && n > 0)
    *last_row_margin = RoutingMargin(
        std::span<const float>(logits.as<float>() + (n - 1) * c.num_experts, size_t(c.num_experts)),
        w, c);
  const bool shared = w.shared.gate.data != nullptr;
  if (shared) RunMlp(w.shared, x, out, s);
  ops::MoeExperts({.x = x, .topk_ids = ids, .topk_weights = weights, .experts = w.experts,
                   .out = out, .accumulate = shared});
}

float RunHostLayerTail(const HostLayerTail& t, const MoeModelConfig& c, FfnScratch& s) {
  ops::Matmul({.x = t.attn, .w = t.wo, .out = t.o});
  ops::RmsNorm({.x = t.o, .weight = t.ffn_norm, .out = t.hn, .residual = t.x, .eps = t.eps});
  float margin = std::numeric_limits<float>::infinity();
  if (t.moe) RunMoeFfn(*t.moe, c, t.hn, t.ffn, s, &margin);
  else RunMlp(*t.mlp, t.hn, t.ffn, s);
  return margin;
}

void AddForCpuPacking(MlpWeights& w, CpuPackedWeights& packer) {
  for (TensorView* m : {&w.gate, &w.up, &w.down})
    if (m->data) packer.Add(m);
}

void AddForCpuPacking(MoeFfnWeights& w, CpuPackedWeights& packer) {
  for (ops::MoeExpertWeights& e : w.experts)
    for (TensorView* m : {&e.gate, &e.up, &e.down}) packer.Add(m);
  AddForCpuPacking(w.shared, packer);
}

}  // namespace pg::models
