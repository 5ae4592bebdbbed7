#include "models/llama.h"

#include <cmath>
#include <string>

#include "core/status.h"

namespace pg::models {
namespace {

struct LayerWeights {
  TensorView attn_norm, ffn_norm;                 // [hidden] f32
  TensorView wq, wk, wv, wo;                      // [out, in]
  TensorView bq, bk, bv;                          // optional biases (f32)
  TensorView q_norm, k_norm;                      // optional [head_dim] f32
  TensorView w_gate, w_up, w_down;
};

// Grow-only scratch: activations for up to `capacity` tokens. Views are re-sliced per batch.
struct Scratch {
  int64_t capacity = 0;
  Tensor x, hn, q, k, v, attn, o, gate, up, act, down, gathered;
};

class LlamaModel final : public Model {
 public:
  LlamaModel(ModelConfig config, std::unique_ptr<WeightStore> weights)
      : config_(std::move(config)), weights_(std::move(weights)) {
    const auto& c = config_;
    const int64_t h = c.hidden_size, q = int64_t(c.num_heads) * c.head_dim,
                  kv = int64_t(c.num_kv_heads) * c.head_dim, f = c.intermediate_size;
    WeightStore& w = *weights_;
    embed_ = w.Get("token_embd.weight", {c.vocab_size, h});
    output_norm_ = w.GetF32("output_norm.weight", {h});
    output_ = c.tie_word_embeddings || !w.Find("output.weight")
                  ? embed_
                  : w.Get("output.weight", {c.vocab_size, h});
    layers_.resize(size_t(c.num_layers));
    for (int i = 0; i < c.num_layers; ++i) {
      const std::string p = "blk." + std::to_string(i) + ".";
      LayerWeights& L = layers_[size_t(i)];
      L.attn_norm = w.GetF32(p + "attn_norm.weight", {h});
      L.ffn_norm = w.GetF32(p + "ffn_norm.weight", {h});
      L.wq = w.Get(p + "attn_q.weight", {q, h});
      L.wk = w.Get(p + "attn_k.weight", {kv, h});
      L.wv = w.Get(p + "attn_v.weight", {kv, h});
      L.wo = w.Get(p + "attn_output.weight", {h, q});
      L.w_gate = w.Get(p + "ffn_gate.weight", {f, h});
      L.w_up = w.Get(p + "ffn_up.weight", {f, h});
      L.w_down = w.Get(p + "ffn_down.weight", {h, f});
      if (c.attention_bias || w.Find(p + "attn_q.bias")) {
        L.bq = w.GetF32(p + "attn_q.bias", {q});
        L.bk = w.GetF32(p + "attn_k.bias", {kv});
        L.bv = w.GetF32(p + "attn_v.bias", {kv});
      }
      if (c.qk_norm) {
        L.q_norm = w.GetF32(p + "attn_q_norm.weight", {c.head_dim});
        L.k_norm = w.GetF32(p + "attn_k_norm.weight", {c.head_dim});
      }
    }
    attn_scale_ = 1.0f / std::sqrt(float(c.head_dim)) * ops::RopeAttentionScale(c.rope);
  }

  const ModelConfig& config() const override { return config_; }
  int64_t weight_bytes() const override { return weights_->total_bytes(); }

  void Forward(const ForwardBatch& b, const KvCacheLayers& kv, TensorView logits) override {
    const auto& c = config_;
    const int64_t n = int64_t(b.tokens.size());
    const int64_t m = int64_t(b.logit_rows.size());
    PG_CHECK(b.positions.size() == b.tokens.size() && b.attention != nullptr);
    PG_CHECK(int(kv.layers.size()) == c.num_layers, "kv layers {}", kv.layers.size());
    PG_CHECK(logits.ndim == 2 && logits.dim(0) == m && logits.dim(1) == c.vocab_size,
             "logits {}", logits.ShapeString());
    if (n == 0) return;
    Reserve(n);
    const int64_t h = c.hidden_size, nh = c.num_heads, nkv = c.num_kv_heads, hd = c.head_dim,
                  f = c.intermediate_size;
    auto rows = [n](const Tensor& t, int64_t cols) {
      return TensorView::Contiguous(t.view().data, DType::kF32, {n, cols});
    };
    TensorView x = rows(s_.x, h), hn = rows(s_.hn, h), q = rows(s_.q, nh * hd),
               k = rows(s_.k, nkv * hd), v = rows(s_.v, nkv * hd), attn = rows(s_.attn, nh * hd),
               o = rows(s_.o, h), gate = rows(s_.gate, f), up = rows(s_.up, f),
               act = rows(s_.act, f), down = rows(s_.down, h);
    TensorView ids = TensorView::Contiguous(const_cast<int32_t*>(b.tokens.data()), DType::kI32, {n});
    TensorView pos =
        TensorView::Contiguous(const_cast<int32_t*>(b.positions.data()), DType::kI32, {n});
    TensorView q3 = q.Reshape({n, nh, hd}), k3 = k.Reshape({n, nkv, hd}),
               v3 = v.Reshape({n, nkv, hd}), attn3 = attn.Reshape({n, nh, hd});

    ops::Embedding({.table = embed_, .ids = ids, .out = x});
    TensorView pending;  // the previous sub-layer's output, not yet added to x
    for (int li = 0; li < c.num_layers; ++li) {
      const LayerWeights& L = layers_[size_t(li)];
      ops::RmsNorm({.x = pending.data ? pending : x, .weight = L.attn_norm, .out = hn,
                    .residual = pending.data ? x : TensorView{}, .eps = c.rms_norm_eps});
      ops::Matmul({.x = hn, .w = L.wq, .out = q, .bias = L.bq});
      ops::Matmul({.x = hn, .w = L.wk, .out = k, .bias = L.bk});
      ops::Matmul({.x = hn, .w = L.wv, .out = v, .bias = L.bv});
      if (L.q_norm.data) {
        TensorView qr = q.Reshape({n * nh, hd}), kr = k.Reshape({n * nkv, hd});
        ops::RmsNorm({.x = qr, .weight = L.q_norm, .out = qr, .eps = c.rms_norm_eps});
        ops::RmsNorm({.x = kr, .weight = L.k_norm, .out = kr, .eps = c.rms_norm_eps});
      }
      ops::Rope({.x = q3, .positions = pos, .config = c.rope});
      ops::Rope({.x = k3, .positions = pos, .config = c.rope});
      const ops::KvCacheView& cache = kv.layers[size_t(li)];
      ops::KvWrite({.k = k3, .v = v3, .cache = cache, .batch = b.attention});
      ops::Attention({.q = q3, .out = attn3, .cache = cache, .batch = b.attention,
                      .scale = attn_scale_});
      ops::Matmul({.x = attn, .w = L.wo, .out = o});
      ops::RmsNorm({.x = o, .weight = L.ffn_norm, .out = hn, .residual = x, .eps = c.rms_norm_eps});
      ops::Matmul({.x = hn, .w = L.w_gate, .out = gate});
      ops::Matmul({.x = hn, .w = L.w_up, .out = up});
      ops::SwiGlu({.gate = gate, .up = up, .out = act});
      ops::Matmul({.x = act, .w = L.w_down, .out = down});
      pending = down;
    }
    // Only the rows that need logits go through the final norm and the output projection.
    TensorView g = TensorView::Contiguous(s_.gathered.view().data, DType::kF32, {m, h});
    TensorView gd = TensorView::Contiguous(s_.hn.view().data, DType::kF32, {m, h});
    for (int64_t i = 0; i < m; ++i) {
      int64_t r = b.logit_rows[size_t(i)];
      PG_CHECK(r >= 0 && r < n, "logit row {} of {}", r, n);
      float* dst = g.as<float>() + i * h;
      const float* xr = x.as<float>() + r * h;
      const float* pr = pending.as<float>() + r * h;
      for (int64_t j = 0; j < h; ++j) dst[j] = xr[j] + pr[j];
    }
    ops::RmsNorm({.x = g, .weight = output_norm_, .out = gd, .eps = c.rms_norm_eps});
    ops::Matmul({.x = gd, .w = output_, .out = logits});
  }

 private:
  void Reserve(int64_t n) {
    if (n <= s_.capacity) return;
    const auto& c = config_;
    const int64_t cap = std::max<int64_t>(n, 16);
    const int64_t h = c.hidden_size, qd = int64_t(c.num_heads) * c.head_dim,
                  kvd = int64_t(c.num_kv_heads) * c.head_dim, f = c.intermediate_size;
    s_.x = Tensor(DType::kF32, {cap, h});
    s_.hn = Tensor(DType::kF32, {cap, h});
    s_.q = Tensor(DType::kF32, {cap, qd});
    s_.k = Tensor(DType::kF32, {cap, kvd});
    s_.v = Tensor(DType::kF32, {cap, kvd});
    s_.attn = Tensor(DType::kF32, {cap, qd});
    s_.o = Tensor(DType::kF32, {cap, h});
    s_.gate = Tensor(DType::kF32, {cap, f});
    s_.up = Tensor(DType::kF32, {cap, f});
    s_.act = Tensor(DType::kF32, {cap, f});
    s_.down = Tensor(DType::kF32, {cap, h});
    s_.gathered = Tensor(DType::kF32, {cap, h});
    s_.capacity = cap;
  }

  ModelConfig config_;
  std::unique_ptr<WeightStore> weights_;
  TensorView embed_, output_norm_, output_;
  std::vector<LayerWeights> layers_;
  float attn_scale_ = 1.0f;
  Scratch s_;
};

}  // namespace

std::unique_ptr<Model> CreateLlama(ModelConfig config, std::unique_ptr<WeightStore> weights) {
  return std::make_unique<LlamaModel>(std::move(config), std::move(weights));
}

}  // namespace pg::models
