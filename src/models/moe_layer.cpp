#include "models/moe_layer.h"

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

void RunMoeFfn(const MoeFfnWeights& w, const MoeModelConfig& c, const TensorView& x,
               const TensorView& out, FfnScratch& s) {
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
  const bool shared = w.shared.gate.data != nullptr;
  if (shared) RunMlp(w.shared, x, out, s);
  ops::MoeExperts({.x = x, .topk_ids = ids, .topk_weights = weights, .experts = w.experts,
                   .out = out, .accumulate = shared});
}

}  // namespace pg::models
