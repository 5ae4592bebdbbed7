#include "models/deepseek_v3.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/status.h"
#include "models/logit_head.h"
#include "models/moe_layer.h"

namespace pg::models {
namespace {

struct Layer {
  TensorView attn_norm, ffn_norm;  // [hidden] f32
  TensorView wq;                   // q_proj [heads * qk, hidden] (no q_lora) ...
  TensorView wq_a, q_a_norm, wq_b; // ... or q_a [q_lora, hidden], norm [q_lora], q_b [heads * qk, q_lora]
  TensorView wkv_a;                // [kv_lora + rope, hidden]
  TensorView kv_a_norm;            // [kv_lora] f32
  TensorView wkv_b;                // [heads * (nope + v), kv_lora]
  TensorView wo;                   // [hidden, heads * v]
  bool moe = false;
  MlpWeights mlp;
  MoeFfnWeights moe_ffn;
};

// A [rows, cols] f32 view into a row-major buffer of `stride` values per row, at column `col`.
TensorView Cols(const TensorView& t, int64_t col, int64_t cols) {
  TensorView v = t;
  v.data = t.as<float>() + col;
  v.shape[1] = cols;
  return v;
}

class DeepseekV3Model final : public Model {
 public:
  DeepseekV3Model(MoeModelConfig c, std::unique_ptr<MoeWeights> w)
      : c_(std::move(c)), w_(std::move(w)) {
    const ModelConfig& b = c_.base;
    const int64_t h = b.hidden_size, nh = b.num_heads;
    const int64_t qk = c_.qk_nope_head_dim + c_.qk_rope_head_dim;
    MoeWeights& W = *w_;
    embed_ = W.Get("model.embed_tokens.weight", {b.vocab_size, h});
    norm_ = W.GetF32("model.norm.weight", {h});
    output_ = b.tie_word_embeddings || !W.Has("lm_head.weight")
                  ? embed_
                  : W.Get("lm_head.weight", {b.vocab_size, h});
    layers_.resize(size_t(b.num_layers));
    for (int i = 0; i < b.num_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      const std::string a = p + "self_attn.";
      Layer& L = layers_[size_t(i)];
      L.attn_norm = W.GetF32(p + "input_layernorm.weight", {h});
      L.ffn_norm = W.GetF32(p + "post_attention_layernorm.weight", {h});
      if (c_.q_lora_rank > 0) {
        L.wq_a = W.Get(a + "q_a_proj.weight", {c_.q_lora_rank, h});
        L.q_a_norm = W.GetF32(a + "q_a_layernorm.weight", {c_.q_lora_rank});
        L.wq_b = W.Get(a + "q_b_proj.weight", {nh * qk, c_.q_lora_rank});
      } else {
        L.wq = W.Get(a + "q_proj.weight", {nh * qk, h});
      }
      L.wkv_a = W.Get(a + "kv_a_proj_with_mqa.weight", {c_.latent_dim(), h});
      L.kv_a_norm = W.GetF32(a + "kv_a_layernorm.weight", {c_.kv_lora_rank});
      L.wkv_b = W.Get(a + "kv_b_proj.weight",
                      {nh * (c_.qk_nope_head_dim + c_.v_head_dim), c_.kv_lora_rank});
      L.wo = W.Get(a + "o_proj.weight", {h, nh * c_.v_head_dim});
      L.moe = c_.IsMoeLayer(i);
      if (L.moe) L.moe_ffn = LoadMoeFfn(W, p + "mlp.", c_);
      else L.mlp = LoadMlp(W, p + "mlp.", h, b.intermediate_size);
    }
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
    const int64_t h = b.hidden_size, nh = b.num_heads, nope = c_.qk_nope_head_dim,
                  rope = c_.qk_rope_head_dim, qk = nope + rope, vd = c_.v_head_dim,
                  rank = c_.kv_lora_rank, lat = c_.latent_dim();
    auto buf = [&](std::vector<float>& v, int64_t cols) {
      if (int64_t(v.size()) < n * cols) v.resize(size_t(n * cols));
      return TensorView::Contiguous(v.data(), DType::kF32, {n, cols});
    };
    TensorView x = buf(x_, h), hn = buf(hn_, h), q = buf(q_, nh * qk), kva = buf(kva_, lat),
               qpe = buf(qpe_, nh * rope), attn = buf(attn_, nh * vd), o = buf(o_, h),
               ffn = buf(ffn_, h);
    TensorView qa = c_.q_lora_rank > 0 ? buf(qa_, c_.q_lora_rank) : TensorView{};
    TensorView ids = TensorView::Contiguous(const_cast<int32_t*>(fb.tokens.data()), DType::kI32, {n});
    TensorView pos = TensorView::Contiguous(const_cast<int32_t*>(fb.positions.data()), DType::kI32, {n});
    // Views: the latent part of kva [n, rank] and its rope part [n, 1, rope] (row stride lat).
    TensorView c_kv = Cols(kva, 0, rank);
    TensorView k_pe = Cols(kva, rank, rope);
    k_pe.ndim = 3;
    k_pe.shape = {n, 1, rope};
    k_pe.strides = {lat, rope, 1};
    const bool decode = std::all_of(fb.attention->q_len.begin(), fb.attention->q_len.end(),
                                    [](int32_t l) { return l == 1; });
    ops::Embedding({.table = embed_, .ids = ids, .out = x});
    for (int li = 0; li < b.num_layers; ++li) {
      const Layer& L = layers_[size_t(li)];
      ops::RmsNorm({.x = li ? ffn : x, .weight = L.attn_norm, .out = hn,
                    .residual = li ? x : TensorView{}, .eps = b.rms_norm_eps});
      if (c_.q_lora_rank > 0) {
        ops::Matmul({.x = hn, .w = L.wq_a, .out = qa});
        ops::RmsNorm({.x = qa, .weight = L.q_a_norm, .out = qa, .eps = b.rms_norm_eps});
        ops::Matmul({.x = qa, .w = L.wq_b, .out = q});
      } else {
        ops::Matmul({.x = hn, .w = L.wq, .out = q});
      }
      ops::Matmul({.x = hn, .w = L.wkv_a, .out = kva});
      ops::RmsNorm({.x = c_kv, .weight = L.kv_a_norm, .out = c_kv, .eps = b.rms_norm_eps});
      if (rope > 0) {
        ops::Rope({.x = k_pe, .positions = pos, .config = b.rope});
        // q's rope dims (the last `rope` of each head) go through a packed buffer.
        float* qp = q.as<float>();
        float* pe = qpe.as<float>();
        for (int64_t r = 0; r < n * nh; ++r) std::copy_n(qp + r * qk + nope, rope, pe + r * rope);
        ops::Rope({.x = qpe.Reshape({n, nh, rope}), .positions = pos, .config = b.rope});
        for (int64_t r = 0; r < n * nh; ++r)
          for (int64_t i = 0; i < rope; ++i) qp[r * qk + nope + i] = pe[r * rope + i] * c_.rope_q_scale;
      }
      const ops::KvCacheView& cache = kv.layers[size_t(li)];
      ops::MlaCacheWrite({.latent = kva, .cache = cache, .batch = fb.attention});
      ops::MlaAttention({.q = q.Reshape({n, nh, qk}), .w_kv_b = L.wkv_b,
                         .out = attn.Reshape({n, nh, vd}), .cache = cache, .batch = fb.attention,
                         .kv_lora_rank = int(rank), .rope_dim = int(rope),
                         .scale = c_.softmax_scale,
                         .mode = decode ? ops::MlaMode::kAbsorbed : ops::MlaMode::kExpanded});
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
  std::vector<float> x_, hn_, q_, qa_, kva_, qpe_, attn_, o_, ffn_, g_;  // grow-only
  FfnScratch scratch_;
};

}  // namespace

std::unique_ptr<Model> CreateDeepseekV3(MoeModelConfig config, std::unique_ptr<MoeWeights> weights) {
  return std::make_unique<DeepseekV3Model>(std::move(config), std::move(weights));
}

}  // namespace pg::models
