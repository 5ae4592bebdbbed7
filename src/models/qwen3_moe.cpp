#include "models/qwen3_moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/status.h"
#include "models/logit_head.h"
#include "models/moe_device.h"
#include "models/moe_layer.h"
#include "kernels/ops_fused.h"
#include "kernels/ops_fused_attention.h"

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

// The device copy of a layer: bf16 matrices, f32 norms (the same HF names as Layer's).
struct DeviceLayer {
  TensorView attn_norm, ffn_norm, q_norm, k_norm;
  DeviceMatrix wq, wk, wv, wo;
  // bf16: q, k, v as one matrix [q + 2 kv, hidden] (wq, wk, wv are its row ranges). A batch of
  // one token runs one GEMV into it; larger batches run the three (q/k-norm needs each
  // projection's head rows packed, which a fused row of several tokens is not).
  TensorView wqkv;
  bool moe = false;
  DeviceMlp mlp;
  DeviceMoeFfn moe_ffn;
};

// Device activations for up to `capacity` tokens (bf16), carved once at placement.
struct DeviceActs {
  int64_t capacity = 0;
  TensorView x, hn, q, k, v, attn, gathered;
  TensorView qkv;  // [1, q + 2 kv]: the fused projection of a one-token batch
  DeviceFfnScratch ffn_scratch;
};

class Qwen3MoeModel final : public Model {
 public:
  // A model with no host weights: Place(random) must follow before any Forward.
  explicit Qwen3MoeModel(MoeModelConfig c) : c_(std::move(c)) {
    scale_ = 1.0f / std::sqrt(float(c_.base.head_dim)) * ops::RopeAttentionScale(c_.base.rope);
  }

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
  int64_t weight_bytes() const override {
    return on_device() ? device_weight_bytes_ : w_->total_bytes();
  }
  bool on_device() const override { return device_ != nullptr; }
  int64_t streamed_weight_bytes() const override {
    return on_device() ? StreamedDeviceBytes(device_weight_bytes_, d_embed_, d_output_)
                       : weight_bytes();
  }
  float last_routing_margin() const override { return last_routing_margin_; }
  int64_t last_forward_weight_bytes() const override {
    if (!on_device()) return streamed_weight_bytes();
    return LastForwardDeviceBytes(streamed_weight_bytes(), d_layers_, c_, last_tokens_, *device_);
  }

  void PlaceOnDevice(DeviceMemory& memory, const DevicePlacement& placement) override {
    PG_ENSURE(w_ != nullptr, kInvalidArgument, "model has no host weights to place");
    Place(memory, placement, /*random=*/false, 0);
  }

  // Allocates device weights (converted from the host store by HF name, or random) and
  // activation scratch for placement.max_batch_tokens tokens.
  void Place(DeviceMemory& memory, const DevicePlacement& placement, bool random, uint64_t seed) {
    PG_ENSURE(!on_device(), kInvalidArgument, "model is already on a device");
    PG_ENSURE(placement.max_batch_tokens > 0, kInvalidArgument,
              "device placement needs max_batch_tokens > 0");
    const ModelConfig& b = c_.base;
    const int64_t h = b.hidden_size, qd = int64_t(b.num_heads) * b.head_dim,
                  kvd = int64_t(b.num_kv_heads) * b.head_dim, vocab = b.vocab_size;
    const int64_t cap = placement.max_batch_tokens;
    DeviceWeightMaker mk(memory, random, seed);
    MoeDeviceSource src(mk, random ? nullptr : w_.get(), /*random_fp8=*/false);
    d_embed_ = src.Bf16("model.embed_tokens.weight", vocab, h);
    const bool untied = random ? !b.tie_word_embeddings : output_.data != embed_.data;
    d_output_ = untied ? src.Bf16("lm_head.weight", vocab, h) : d_embed_;
    d_norm_ = src.Vector("model.norm.weight", h, 1.0f);
    d_layers_.resize(size_t(b.num_layers));
    for (int i = 0; i < b.num_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      DeviceLayer& D = d_layers_[size_t(i)];
      D.attn_norm = src.Vector(p + "input_layernorm.weight", h, 1.0f);
      D.ffn_norm = src.Vector(p + "post_attention_layernorm.weight", h, 1.0f);
      D.q_norm = src.Vector(p + "self_attn.q_norm.weight", b.head_dim, 1.0f);
      D.k_norm = src.Vector(p + "self_attn.k_norm.weight", b.head_dim, 1.0f);
      const std::string a = p + "self_attn.";
      if (src.IsFp8(a + "q_proj.weight")) {
        D.wq = src.Linear(a + "q_proj.weight", qd, h);
        D.wk = src.Linear(a + "k_proj.weight", kvd, h);
        D.wv = src.Linear(a + "v_proj.weight", kvd, h);
      } else {
        D.wqkv = src.Bf16Concat({a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"},
                                {qd, kvd, kvd}, h);
        D.wq.w = D.wqkv.Slice0(0, qd);
        D.wk.w = D.wqkv.Slice0(qd, kvd);
        D.wv.w = D.wqkv.Slice0(qd + kvd, kvd);
      }
      D.wo = src.Linear(p + "self_attn.o_proj.weight", h, qd);
      D.moe = c_.IsMoeLayer(i);
      if (D.moe) D.moe_ffn = PlaceMoeFfn(src, p + "mlp.", c_, cap);
      else D.mlp = PlaceMlp(src, p + "mlp.", h, b.intermediate_size);
    }
    // Each MoE block's hint: the next layer's fused qkv, read right after it (moe_device.h;
    // 1 x 1K 2545 -> 2527 us a step at the default 25 %, session 27).
    for (size_t i = 0; i + 1 < d_layers_.size(); ++i)
      if (d_layers_[i].moe) d_layers_[i].moe_ffn.l2_after = d_layers_[i + 1].wqkv;
    device_weight_bytes_ = mk.bytes();
    DeviceActs& A = d_;
    A.capacity = cap;
    A.x = mk.Activations(cap, h);
    A.hn = mk.Activations(cap, h);
    A.q = mk.Activations(cap, qd);
    A.qkv = mk.Activations(1, qd + 2 * kvd);
    A.k = mk.Activations(cap, kvd);
    A.v = mk.Activations(cap, kvd);
    A.attn = mk.Activations(cap, qd);
    A.gathered = mk.Activations(cap, h);
    A.ffn_scratch = PlaceFfnScratch(mk, c_, cap);
    device_ = &memory;
  }

  void Forward(const ForwardBatch& fb, const KvCacheLayers& kv, TensorView logits) override {
    if (on_device()) return ForwardDevice(fb, kv, logits);
    const ModelConfig& b = c_.base;
    const int64_t n = int64_t(fb.tokens.size()), m = int64_t(fb.logit_rows.size());
    PG_CHECK(fb.positions.size() == fb.tokens.size() && fb.attention != nullptr);
    PG_CHECK(int(kv.layers.size()) == b.num_layers, "kv layers {}", kv.layers.size());
    PG_CHECK(logits.ndim == 2 && logits.dim(0) == m && logits.dim(1) == b.vocab_size);
    if (n == 0) return;
    PackHostWeights();
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
    float routing_margin = std::numeric_limits<float>::infinity();
    for (int li = 0; li < b.num_layers; ++li) {
      const Layer& L = host_.layer(li);
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
      routing_margin = std::min(
          routing_margin,
          RunHostLayerTail({.attn = attn, .wo = L.wo, .o = o, .x = x, .hn = hn, .ffn = ffn,
                            .ffn_norm = L.ffn_norm, .eps = b.rms_norm_eps,
                            .moe = L.moe ? &L.moe_ffn : nullptr, .mlp = &L.mlp},
                           c_, scratch_));
    }
    last_routing_margin_ = routing_margin;
    RunLogitHead({.residual = x, .last = ffn, .logit_rows = fb.logit_rows,
                  .gathered = buf(g_, h), .normed = hn, .norm_weight = norm_,
                  .eps = b.rms_norm_eps, .output = host_.output(), .logits = logits});
  }

  void PrepareHost() override {
    if (!on_device()) PackHostWeights();
  }

 private:
  // The host forward's matrices (host_, cpu_pack.h), made on the first host forward.
  void PackHostWeights() {
    host_.Prepare(layers_, output_, [](Layer& L, CpuPackedWeights& p) {
      for (TensorView* w : {&L.wq, &L.wk, &L.wv, &L.wo}) p.Add(w);
      if (L.moe) AddForCpuPacking(L.moe_ffn, p);
      else AddForCpuPacking(L.mlp, p);
    });
  }

  // The device path: the host path's computation in bf16 on the device buffers (weights and
  // scratch at fixed addresses: capturable in a CUDA graph). Host work: validation, launches.
  void ForwardDevice(const ForwardBatch& fb, const KvCacheLayers& kv, TensorView logits) {
    const ModelConfig& b = c_.base;
    const int64_t n = int64_t(fb.tokens.size()), m = int64_t(fb.logit_rows.size());
    CheckDeviceBatch(fb, kv, logits, b, *device_, d_.capacity);
    if (n == 0) return;
    (void)m;
    const int64_t nh = b.num_heads, nkv = b.num_kv_heads, hd = b.head_dim;
    const DeviceActs& A = d_;
    const TensorView x = A.x.Slice0(0, n), hn = A.hn.Slice0(0, n), q = A.q.Slice0(0, n),
                     k = A.k.Slice0(0, n), v = A.v.Slice0(0, n), attn = A.attn.Slice0(0, n);
    const TensorView q3 = q.Reshape({n, nh, hd}), k3 = k.Reshape({n, nkv, hd}),
                     v3 = v.Reshape({n, nkv, hd}), attn3 = attn.Reshape({n, nh, hd});
    // One-token batches: [1, heads, head_dim] views into the fused projection (row stride
    // q + 2 kv).
    auto heads3 = [&](int64_t col, int64_t heads) {
      TensorView t = A.qkv;
      t.data = static_cast<uint16_t*>(A.qkv.data) + col;
      t.ndim = 3;
      t.shape = {1, heads, hd};
      t.strides = {A.qkv.strides[0], hd, 1};
      return t;
    };
    const TensorView fq3 = heads3(0, nh), fk3 = heads3(nh * hd, nkv),
                     fv3 = heads3((nh + nkv) * hd, nkv);
    const TensorView& pos = fb.device_positions;
    // x is the residual stream throughout: the attention output projection and the FFN
    // accumulate into it (one bf16 rounding of x + y each), the input RMSNorm runs inside the
    // qkv projection (FusedMatmul: one kernel at decode batch sizes), and the per-head q/k
    // RMSNorm inside RopeKvWrite.
    ops::Embedding({.table = d_embed_, .ids = fb.device_tokens, .out = x});
    for (int li = 0; li < b.num_layers; ++li) {
      const DeviceLayer& L = d_layers_[size_t(li)];
      const bool fused = n == 1 && L.wqkv.data;
      if (fused) {
        ops::FusedMatmul({.x = x, .norm_weight = L.attn_norm, .eps = b.rms_norm_eps,
                          .w = L.wqkv, .out = A.qkv, .normed = hn});
      } else {
        for (const auto& [w, out] : {std::pair{&L.wq, q}, std::pair{&L.wk, k}, std::pair{&L.wv, v}})
          ops::FusedMatmul({.x = x, .norm_weight = L.attn_norm, .eps = b.rms_norm_eps,
                            .w = w->w, .w_scale = w->scale, .out = out, .normed = hn});
      }
      const TensorView& qs = fused ? fq3 : q3;
      const TensorView& ks = fused ? fk3 : k3;
      const TensorView& vs = fused ? fv3 : v3;
      const ops::KvCacheView& cache = kv.layers[size_t(li)];
      // q/k RMSNorm per head, RoPE on q and k, k and v into the cache, then attention: one
      // kernel each, or (PEREGRINE_FUSED_ATTN, small decode batches) one kernel for both
      // (ops_fused_attention.h; q and k are scratch afterwards).
      const ops::RopeKvWriteParams rope{.q = qs, .k = ks, .v = vs, .positions = pos,
                                        .config = b.rope, .cache = cache, .batch = fb.attention,
                                        .q_norm = L.q_norm, .k_norm = L.k_norm,
                                        .norm_eps = b.rms_norm_eps};
      // No l2_after hint for wo: at 1 x 32K it cost 19-38 us a step (12 / 25 / 100 %, session
      // 27), where Llama-3.1-8B's 33.5 MB wo gains 61 us; this model's 16 MB wo gets onto the
      // SMs sooner.
      if (ops::FusedAttentionEnabled()) {
        ops::RopeKvWriteAttention({.rope = rope, .out = attn3, .scale = scale_});
      } else {
        ops::RopeKvWrite(rope);
        ops::Attention({.q = qs, .out = attn3, .cache = cache, .batch = fb.attention,
                        .scale = scale_});
      }
      DeviceMatmul(attn, L.wo, x, /*accumulate=*/true);
      // hn = RmsNorm(x), inside the MoE block at one token (moe_device.cpp: the router kernel).
      const FfnNorm ffn_norm{.x = x, .weight = L.ffn_norm, .eps = b.rms_norm_eps};
      if (L.moe) {
        RunDeviceMoeFfn(L.moe_ffn, c_, hn, x, A.ffn_scratch, &ffn_norm, /*accumulate=*/true);
      } else {
        ops::RmsNorm({.x = x, .weight = L.ffn_norm, .out = hn, .eps = b.rms_norm_eps});
        RunDeviceMlp(L.mlp, hn, x, A.ffn_scratch, /*accumulate=*/true);
      }
    }
    RunLogitHead({.residual = x, .logit_rows = fb.logit_rows, .gathered = A.gathered,
                  .normed = A.hn, .norm_weight = d_norm_, .eps = b.rms_norm_eps,
                  .output = d_output_, .logits = logits});
    last_tokens_ = n;
  }

  MoeModelConfig c_;
  std::unique_ptr<MoeWeights> w_;
  TensorView embed_, norm_, output_;
  std::vector<Layer> layers_;
  HostPackedModel<Layer> host_;  // PackHostWeights
  float scale_ = 1.0f;
  std::vector<float> x_, hn_, q_, k_, v_, attn_, o_, ffn_, g_;  // grow-only activations
  FfnScratch scratch_;
  // Device copy (null device_: the model runs on the host).
  DeviceMemory* device_ = nullptr;
  TensorView d_embed_, d_norm_, d_output_;
  std::vector<DeviceLayer> d_layers_;
  DeviceActs d_;
  int64_t device_weight_bytes_ = 0;
  int64_t last_tokens_ = 0;  // tokens of the last device forward (its routes are kept)
  float last_routing_margin_ = std::numeric_limits<float>::infinity();  // last host forward
};

}  // namespace

std::unique_ptr<Model> CreateQwen3Moe(MoeModelConfig config, std::unique_ptr<MoeWeights> weights) {
  return std::make_unique<Qwen3MoeModel>(std::move(config), std::move(weights));
}

std::unique_ptr<Model> CreateQwen3MoeOnDevice(MoeModelConfig config, DeviceMemory& memory,
                                              const DevicePlacement& placement, uint64_t seed) {
  config.Validate();
  auto model = std::make_unique<Qwen3MoeModel>(std::move(config));
  model->Place(memory, placement, /*random=*/true, seed);
  return model;
}

}  // namespace pg::models
