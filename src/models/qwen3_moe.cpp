#include "models/qwen3_moe.h"

#include <cmath>
#include <string>

#include "core/status.h"
#include "models/logit_head.h"
#include "models/moe_layer.h"

namespace pg::models {
namespace {

struct Layer {
  TensorView attn_norm, ffn_norm;  // [hidden] f32
  TensorView wq, wk, wv, wo;       // [out, in]
  TensorView q_norm, k_norm;       // [head_dim] f32
  bool moe = false;
  MlpWeights mlp;                  // dense layers
  MoeFfnWeights moe_ffn;           // MoE layers
};

class Qwen3MoeModel final : public Model {
 public:
  Qwen3MoeModel(MoeModelConfig c, std::unique_ptr<MoeWeights> w)
      : c_(std::move(c)), w_(std::move(w)) {
    const ModelConfig& b = c_.base;
    const int64_t h = b.hidden_size, q = int64_t(b.num_heads) * b.head_dim,
                  kv = int64_t(b.num_kv_heads) * b.head_dim;
    MoeWeights& w_ref = *w_;
    embed_ = w_ref.Get("model.embed_tokens.weight", {b.vocab_size, h});
    norm_ = w_ref.GetF32("model.norm.weight", {h});
    output_ = b.tie_word_embeddings || !w_ref.Has("lm_head.weight")
                  ? embed_
                  : w_ref.Get("lm_head.weight", {b.vocab_size, h});
    layers_.resize(size_t(b.num_layers));
    for (int i = 0; i < b.num_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      Layer& L = layers_[size_t(i)];
      L.attn_norm = w_ref.GetF32(p + "input_layernorm.weight", {h});
      L.ffn_norm = w_ref.GetF32(p + "post_attention_layernorm.weight", {h});
      L.wq = w_ref.Get(p + "self_attn.q_proj.weight", {q, h});
      L.wk = w_ref.Get(p + "self_attn.k_proj.weight", {kv, h});
      L.wv = w_ref.Get(p + "self_attn.v_proj.weight", {kv, h});
      L.wo = w_ref.Get(p + "self_attn.o_proj.weight", {h, q});
      L.q_norm = w_ref.GetF32(p + "self_attn.q_norm.weight", {b.head_dim});
      L.k_norm = w_ref.GetF32(p + "self_attn.k_norm.weight", {b.head_dim});
      L.moe = c_.IsMoeLayer(i);
      if (L.moe) L.moe_ffn = LoadMoeFfn(w_ref, p + "mlp.", c_);
      else L.mlp = LoadMlp(w_ref, p + "mlp.", h, b.intermediate_size);
    }
    scale_ = 1.0f / std::sqrt(float(b.head_dim)) * ops::RopeAttentionScale(b.rope);
  }

  const ModelConfig& config() const override { return c_.base; }
  int64_t weight_bytes() const override { return w_->total_bytes(); }

  void Forward(const ForwardBatch& fb, const KvCacheLayers& kv, TensorView logits) override {
    const ModelConfig& b = c_.base;
    const int64_t n = int64_t(fb.tokens.size()), m = int64_t(fb.logit_rows.size());
    PG_CHECK(fb.positions.size() == fb.tokens.size() && fb.attention != nullptr);
    PG_CHECK(int(kv.layers.size()) == b.num_layers, "kv layers {}", kv.layers.size());
    PG_CHECK(logits.ndim == 2 && logits.dim(0) == m && logits.dim(1) == b.vocab_size);
    if (n == 0) return;
    const int64_t h = b.hidden_size, nh = b.num_heads, nkv = b.num_kv_heads, hd = b.head_dim;
    auto buf = [&](std::vector<float>& v, int64_t cols) {
      if (int64_t(v.size()) < n * cols) v.resize(size_t(n * cols));
      return TensorView::Contiguous(v.data(), DType::kF32, {n, cols});
    };
    TensorView x = buf(x_, h), hn = buf(hn_, h), q = buf(q_, nh * hd), k = buf(k_, nkv * hd),
               v = buf(v_, nkv * hd), attn = buf(attn_, nh * hd), o = buf(o_, h),
               ffn = buf(ffn_, h);
    TensorView ids = TensorView::Contiguous(const_cast<int32_t*>(fb.tokens.data()), DType::kI32, {n});
    TensorView pos = TensorView::Contiguous(const_cast<int32_t*>(fb.positions.data()), DType::kI32, {n});
    TensorView q3 = q.Reshape({n, nh, hd}), k3 = k.Reshape({n, nkv, hd}), v3 = v.Reshape({n, nkv, hd}),
               attn3 = attn.Reshape({n, nh, hd});
    ops::Embedding({.table = embed_, .ids = ids, .out = x});
    for (int li = 0; li < b.num_layers; ++li) {
      const Layer& L = layers_[size_t(li)];
      // x holds the residual stream; `ffn` the previous layer's FFN output (not yet added).
      ops::RmsNorm({.x = li ? ffn : x, .weight = L.attn_norm, .out = hn,
                    .residual = li ? x : TensorView{}, .eps = b.rms_norm_eps});
      ops::Matmul({.x = hn, .w = L.wq, .out = q});
      ops::Matmul({.x = hn, .w = L.wk, .out = k});
      ops::Matmul({.x = hn, .w = L.wv, .out = v});
      TensorView qr = q.Reshape({n * nh, hd}), kr = k.Reshape({n * nkv, hd});
      ops::RmsNorm({.x = qr, .weight = L.q_norm, .out = qr, .eps = b.rms_norm_eps});
      ops::RmsNorm({.x = kr, .weight = L.k_norm, .out = kr, .eps = b.rms_norm_eps});
      ops::Rope({.x = q3, .positions = pos, .config = b.rope});
      ops::Rope({.x = k3, .positions = pos, .config = b.rope});
      const ops::KvCacheView& cache = kv.layers[size_t(li)];
      ops::KvWrite({.k = k3, .v = v3, .cache = cache, .batch = fb.attention});
      ops::Attention({.q = q3, .out = attn3, .cache = cache, .batch = fb.attention, .scale = scale_});
      ops::Matmul({.x = attn, .w = L.wo, .out = o});
      ops::RmsNorm({.x = o, .weight = L.ffn_norm, .out = hn, .residual = x, .eps = b.rms_norm_eps});
      if (L.moe) RunMoeFfn(L.moe_ffn, c_, hn, ffn, scratch_);
      else RunMlp(L.mlp, hn, ffn, scratch_);
    }
    RunLogitHead({.residual = x, .last = ffn, .logit_rows = fb.logit_rows,
                  .gathered = buf(g_, h), .normed = hn, .norm_weight = norm_,
                  .eps = b.rms_norm_eps, .output = output_, .logits = logits});
  }

 private:
  MoeModelConfig c_;
  std::unique_ptr<MoeWeights> w_;
  TensorView embed_, norm_, output_;
  std::vector<Layer> layers_;
  float scale_ = 1.0f;
  std::vector<float> x_, hn_, q_, k_, v_, attn_, o_, ffn_, g_;  // grow-only activations
  FfnScratch scratch_;
};

}  // namespace

std::unique_ptr<Model> CreateQwen3Moe(MoeModelConfig config, std::unique_ptr<MoeWeights> weights) {
  return std::make_unique<Qwen3MoeModel>(std::move(config), std::move(weights));
}

}  // namespace pg::models
