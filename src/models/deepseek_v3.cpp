#include "models/deepseek_v3.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/env.h"
#include "core/status.h"
#include "kernels/ops_fused.h"
#include "models/cpu_pack.h"
#include "models/logit_head.h"
#include "models/moe_device.h"
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
  // A deepseek2 GGUF's stored halves of wkv_b (MoeWeights::GetSplitKvB): W_UK_hᵀ per head
  // [heads, kv_lora, nope] and W_UV_h [heads, v, kv_lora]; unset for other stores.
  TensorView wk_b, wv_b;
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

// The device copy of a layer (HF names as Layer's). Projections bf16 or fp8 block-scaled as
// stored; kv_b_proj always bf16 (MlaAttention's weight).
struct DeviceLayer {
  TensorView attn_norm, ffn_norm, q_a_norm, kv_a_norm;  // f32
  DeviceMatrix wq, wq_a, wq_b, wkv_a, wo;
  // q_a (with q_lora) or q, and kv_a, all read the normed input: one matrix
  // [q_rows + latent, hidden], one GEMM (when fused_qkva_; then wq_a / wq / wkv_a are unset).
  DeviceMatrix wq_kva;
  TensorView wkv_b;  // [heads * (nope + v), kv_lora] bf16
  bool moe = false;
  DeviceMlp mlp;
  DeviceMoeFfn moe_ffn;
};

// Device activations for up to `capacity` tokens (bf16), carved once at placement.
struct DeviceActs {
  int64_t capacity = 0;
  TensorView x, hn, qa, q, kva, attn, gathered;  // x: the residual stream
  TensorView q_kva;  // [capacity, q_rows + latent] (fused_qkva_)
  DeviceFfnScratch ffn_scratch;
};

class DeepseekV3Model final : public Model {
 public:
  // A model with no host weights: Place(random) must follow before any Forward.
  explicit DeepseekV3Model(MoeModelConfig c) : c_(std::move(c)) {}

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
      if (const auto split = W.GetSplitKvB(a + "kv_b_proj.weight")) {
        L.wk_b = split->k_b;
        L.wv_b = split->v_b;
      }
      L.wo = W.Get(a + "o_proj.weight", {h, nh * c_.v_head_dim});
      L.moe = c_.IsMoeLayer(i);
      if (L.moe) L.moe_ffn = LoadMoeFfn(W, p + "mlp.", c_);
      else L.mlp = LoadMlp(W, p + "mlp.", h, b.intermediate_size);
    }
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
    Place(memory, placement, /*random=*/false, false, 0);
  }

  // Allocates device weights (from the host store by HF name, fp8 kept fp8; or random, fp8
  // block-scaled when random_fp8) and activation scratch for placement.max_batch_tokens.
  void Place(DeviceMemory& memory, const DevicePlacement& placement, bool random,
             bool random_fp8, uint64_t seed) {
    PG_ENSURE(!on_device(), kInvalidArgument, "model is already on a device");
    PG_ENSURE(placement.max_batch_tokens > 0, kInvalidArgument,
              "device placement needs max_batch_tokens > 0");
    const ModelConfig& b = c_.base;
    const int64_t h = b.hidden_size, nh = b.num_heads, nope = c_.qk_nope_head_dim,
                  rope = c_.qk_rope_head_dim, qk = nope + rope, vd = c_.v_head_dim,
                  rank = c_.kv_lora_rank, lat = c_.latent_dim(), vocab = b.vocab_size;
    const int64_t cap = placement.max_batch_tokens;
    DeviceWeightMaker mk(memory, random, seed);
    MoeDeviceSource src(mk, random ? nullptr : w_.get(), random_fp8);
    d_embed_ = src.Bf16("model.embed_tokens.weight", vocab, h);
    const bool untied = random ? !b.tie_word_embeddings : output_.data != embed_.data;
    d_output_ = untied ? src.Bf16("lm_head.weight", vocab, h) : d_embed_;
    d_norm_ = src.Vector("model.norm.weight", h, 1.0f);
    // YaRN's rope_q_scale multiplies q's rope dims (ropes are linear: before or after the
    // rotation is the same); folded into the rows of the q projection (then bf16).
    std::vector<float> q_rows_scale;
    if (c_.rope_q_scale != 1.0f) {
      q_rows_scale.assign(size_t(nh * qk), 1.0f);
      for (int64_t hd = 0; hd < nh; ++hd)
        for (int64_t i = nope; i < qk; ++i) q_rows_scale[size_t(hd * qk + i)] = c_.rope_q_scale;
    }
    auto q_proj = [&](const std::string& name, int64_t cols) {
      if (q_rows_scale.empty()) return src.Linear(name, nh * qk, cols);
      return DeviceMatrix{src.Bf16(name, nh * qk, cols, q_rows_scale), {}};
    };
    // The first projections of every layer fuse when none of them is stored fp8 (a stored fp8
    // pair's 128-row scale blocks need not line up) or the weights are random.
    const int64_t q_rows = c_.q_lora_rank > 0 ? c_.q_lora_rank : nh * qk;
    auto first_names = [&](const std::string& a) {
      return std::vector<std::string>{
          a + (c_.q_lora_rank > 0 ? "q_a_proj.weight" : "q_proj.weight"),
          a + "kv_a_proj_with_mqa.weight"};
    };
    fused_qkva_ = true;
    for (int i = 0; i < b.num_layers; ++i)
      fused_qkva_ = fused_qkva_ &&
                    src.CanConcat(first_names("model.layers." + std::to_string(i) + ".self_attn."));
    d_layers_.resize(size_t(b.num_layers));
    for (int i = 0; i < b.num_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      const std::string a = p + "self_attn.";
      DeviceLayer& D = d_layers_[size_t(i)];
      D.attn_norm = src.Vector(p + "input_layernorm.weight", h, 1.0f);
      D.ffn_norm = src.Vector(p + "post_attention_layernorm.weight", h, 1.0f);
      if (fused_qkva_) {
        // q's rows carry the folded rope scale without q_lora (q_rows then is nh * qk).
        std::vector<float> rows_scale;
        if (!q_rows_scale.empty() && c_.q_lora_rank == 0) {
          rows_scale = q_rows_scale;
          rows_scale.resize(size_t(q_rows + lat), 1.0f);
        }
        D.wq_kva = src.LinearConcat(first_names(a), {q_rows, lat}, h, rows_scale);
      }
      if (c_.q_lora_rank > 0) {
        if (!fused_qkva_) D.wq_a = src.Linear(a + "q_a_proj.weight", c_.q_lora_rank, h);
        D.q_a_norm = src.Vector(a + "q_a_layernorm.weight", c_.q_lora_rank, 1.0f);
        D.wq_b = q_proj(a + "q_b_proj.weight", c_.q_lora_rank);
      } else if (!fused_qkva_) {
        D.wq = q_proj(a + "q_proj.weight", h);
      }
      if (!fused_qkva_) D.wkv_a = src.Linear(a + "kv_a_proj_with_mqa.weight", lat, h);
      D.kv_a_norm = src.Vector(a + "kv_a_layernorm.weight", rank, 1.0f);
      D.wkv_b = src.Bf16(a + "kv_b_proj.weight", nh * (nope + vd), rank);
      D.wo = src.Linear(a + "o_proj.weight", h, nh * vd);
      D.moe = c_.IsMoeLayer(i);
      if (D.moe) D.moe_ffn = PlaceMoeFfn(src, p + "mlp.", c_, cap);
      else D.mlp = PlaceMlp(src, p + "mlp.", h, b.intermediate_size);
    }
    // No MoE block hint (DeviceMoeFfn::l2_after) for the next layer's q + kv_a: DeepSeek-V2-Lite
    // 1 x 1K was 14-39 us a step slower at 12-100 % (session 27), taken by the down kernel.
    // PEREGRINE_DSV3_MOE_HINT=1 passes it, for A/B runs of the router's hint
    // (PEREGRINE_MOE_ROUTER_L2_PCT, with PEREGRINE_MOE_L2_AFTER_PCT=0 for the down kernel's).
    static const bool moe_hint = EnvFlag("PEREGRINE_DSV3_MOE_HINT", false);
    if (moe_hint && fused_qkva_)
      for (size_t i = 0; i + 1 < d_layers_.size(); ++i)
        if (d_layers_[i].moe) d_layers_[i].moe_ffn.l2_after = d_layers_[i + 1].wq_kva.w;
    device_weight_bytes_ = mk.bytes();
    DeviceActs& A = d_;
    A.capacity = cap;
    A.x = mk.Activations(cap, h);
    A.hn = mk.Activations(cap, h);
    // One row more than the capacity: the rope view of q (ForwardDevice) spans `nope`
    // elements past the last row (never touched).
    if (fused_qkva_) {
      A.q_kva = mk.Activations(cap + 1, q_rows + lat);
      if (c_.q_lora_rank > 0) A.q = mk.Activations(cap + 1, nh * qk);
    } else {
      if (c_.q_lora_rank > 0) A.qa = mk.Activations(cap, c_.q_lora_rank);
      A.q = mk.Activations(cap + 1, nh * qk);
      A.kva = mk.Activations(cap, lat);
    }
    A.attn = mk.Activations(cap, nh * vd);
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
    float routing_margin = std::numeric_limits<float>::infinity();
    for (int li = 0; li < b.num_layers; ++li) {
      const Layer& L = host_.layer(li);
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
      if (rope > 0 && !c_.mla_use_nope) {  // NoPE (Kimi Linear): q_pe, k_pe unrotated
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
      // Decode reads the split Q8_0 halves where the host forward kept them; prefill expands
      // keys and values from the dense f32 copy (the same values, converted once).
      const bool split = decode && L.wk_b.data;
      ops::MlaAttention({.q = q.Reshape({n, nh, qk}), .w_kv_b = split ? TensorView{} : L.wkv_b,
                         .w_k_b = split ? L.wk_b : TensorView{},
                         .w_v_b = split ? L.wv_b : TensorView{}, .out = attn.Reshape({n, nh, vd}),
                         .cache = cache, .batch = fb.attention,
                         .kv_lora_rank = int(rank), .rope_dim = int(rope),
                         .scale = c_.softmax_scale,
                         .mode = decode ? ops::MlaMode::kAbsorbed : ops::MlaMode::kExpanded});
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
  // The host forward's matrices (host_, cpu_pack.h), made on the first host forward: every
  // projection, expert and the head packed. MlaAttention's weight: w_kv_b as dense f32 (it
  // computes in f32: a bf16 checkpoint's would be converted on every call; a split GGUF's
  // joined copy is f32 already), and for the decode a GGUF's split halves as stored when both
  // are Q8_0 (34 bytes per 32 weights instead of 128, the same bits as over their f32 values).
  void PackHostWeights() {
    host_.Prepare(layers_, output_, [](Layer& L, CpuPackedWeights& p) {
      for (TensorView* w : {&L.wq, &L.wq_a, &L.wq_b, &L.wkv_a, &L.wo})
        if (w->data) p.Add(w);
      p.AddDenseF32(&L.wkv_b);
      if (L.wk_b.dtype != DType::kQ8_0 || L.wv_b.dtype != DType::kQ8_0) L.wk_b = L.wv_b = TensorView{};
      if (L.moe) AddForCpuPacking(L.moe_ffn, p);
      else AddForCpuPacking(L.mlp, p);
    });
  }

  // The device path: the host path's computation in bf16 on device buffers at fixed
  // addresses (capturable in a CUDA graph). Decode batches (every q_len 1) run the absorbed
  // MLA, others the expanded one, as the host path.
  void ForwardDevice(const ForwardBatch& fb, const KvCacheLayers& kv, TensorView logits) {
    const ModelConfig& b = c_.base;
    const int64_t n = int64_t(fb.tokens.size());
    CheckDeviceBatch(fb, kv, logits, b, *device_, d_.capacity);
    if (n == 0) return;
    const int64_t nh = b.num_heads, nope = c_.qk_nope_head_dim, rope = c_.qk_rope_head_dim,
                  qk = nope + rope, vd = c_.v_head_dim, rank = c_.kv_lora_rank,
                  lat = c_.latent_dim();
    const DeviceActs& A = d_;
    const TensorView x = A.x.Slice0(0, n), hn = A.hn.Slice0(0, n), attn = A.attn.Slice0(0, n);
    // q [n, nh * qk], qa [n, q_lora] and kva [n, lat]: column ranges of the fused projection's
    // output (row stride q_rows + lat), or their own buffers.
    const int64_t q_rows = c_.q_lora_rank > 0 ? c_.q_lora_rank : nh * qk;
    const TensorView q_kva = fused_qkva_ ? A.q_kva.Slice0(0, n) : TensorView{};
    const TensorView qa = c_.q_lora_rank == 0 ? TensorView{}
                          : fused_qkva_       ? Columns(q_kva, 0, q_rows)
                                              : A.qa.Slice0(0, n);
    const TensorView q = fused_qkva_ && c_.q_lora_rank == 0 ? Columns(q_kva, 0, q_rows)
                                                            : A.q.Slice0(0, n);
    const TensorView kva = fused_qkva_ ? Columns(q_kva, q_rows, lat) : A.kva.Slice0(0, n);
    TensorView q3 = q;  // [n, nh, qk] (row stride of q)
    q3.ndim = 3;
    q3.shape = {n, nh, qk};
    q3.strides = {q.strides[0], qk, 1};
    // kva = [c_kv (rank) | k_pe (rope)] per token: MlaCacheWrite norms c_kv and rotates k_pe
    // (one head of rope dims) in place; MlaAttention rotates q's last `rope` dims per head.
    ops::RopeConfig rope_cfg = b.rope;
    rope_cfg.rotary_dim = int(rope);
    const bool decode = std::all_of(fb.attention->q_len.begin(), fb.attention->q_len.end(),
                                    [](int32_t l) { return l == 1; });
    const TensorView& pos = fb.device_positions;
    // x is the residual stream throughout: the attention output projection and the FFN
    // accumulate into it (one bf16 rounding of x + y each), and the FFN's RMSNorm runs inside
    // the MoE block (at decode sizes the router kernel's prologue: moe_device.h).
    static const bool norm_fused = EnvFlag("PEREGRINE_DSV3_NORM_FUSE", true);
    ops::Embedding({.table = d_embed_, .ids = fb.device_tokens, .out = x});
    for (int li = 0; li < b.num_layers; ++li) {
      const DeviceLayer& L = d_layers_[size_t(li)];
      // input_layernorm + the first projections: the norm inside the projection
      // (FusedMatmul: one kernel at GEMV sizes; without the fused matrix each projection
      // recomputes the row norm, as Llama's separate q/k/v), or (PEREGRINE_DSV3_NORM_FUSE=0,
      // for A/B) RmsNorm then the plain projections.
      if (!norm_fused) ops::RmsNorm({.x = x, .weight = L.attn_norm, .out = hn, .eps = b.rms_norm_eps});
      auto first_proj = [&](const DeviceMatrix& w, const TensorView& out) {
        if (!norm_fused) return DeviceMatmul(hn, w, out);
        ops::FusedMatmul({.x = x, .norm_weight = L.attn_norm, .eps = b.rms_norm_eps, .w = w.w,
                          .w_scale = w.scale, .out = out, .normed = hn});
      };
      if (fused_qkva_) {
        first_proj(L.wq_kva, q_kva);
      } else {
        first_proj(c_.q_lora_rank > 0 ? L.wq_a : L.wq, c_.q_lora_rank > 0 ? qa : q);
        first_proj(L.wkv_a, kva);
      }
      if (c_.q_lora_rank > 0)  // q_a_layernorm + q_b_proj (one kernel at GEMV sizes; the
                               // composition normalises qa in place)
        ops::FusedMatmul({.x = qa, .norm_weight = L.q_a_norm, .eps = b.rms_norm_eps,
                          .w = L.wq_b.w, .w_scale = L.wq_b.scale, .out = q, .normed = qa});
      // kv_a_layernorm + k_pe RoPE + the cache write, and q_pe's RoPE, as MlaAttention's
      // optional prologues (the same computation as RmsNorm; Rope; Rope; MlaCacheWrite first;
      // at <= 4 tokens the CUDA op runs the whole block in three kernels).
      const TensorView rope_pos = rope > 0 && !c_.mla_use_nope ? pos : TensorView{};  // NoPE
      const ops::KvCacheView& cache = kv.layers[size_t(li)];
      const ops::MlaCacheWriteParams write{
          .latent = kva, .cache = cache, .batch = fb.attention, .norm_weight = L.kv_a_norm,
          .eps = b.rms_norm_eps, .kv_lora_rank = int(rank), .positions = rope_pos,
          .rope = rope_cfg};
      ops::MlaAttention({.q = q3, .w_kv_b = L.wkv_b,
                         .out = attn.Reshape({n, nh, vd}), .cache = cache, .batch = fb.attention,
                         .kv_lora_rank = int(rank), .rope_dim = int(rope),
                         .scale = c_.softmax_scale,
                         .mode = decode ? ops::MlaMode::kAbsorbed : ops::MlaMode::kExpanded,
                         .positions = rope_pos, .rope = rope_cfg, .write = &write});
      DeviceMatmul(attn, L.wo, x, /*accumulate=*/true);
      const FfnNorm ffn_norm{.x = x, .weight = L.ffn_norm, .eps = b.rms_norm_eps};  // -> hn
      if (L.moe) RunDeviceMoeFfn(L.moe_ffn, c_, hn, x, A.ffn_scratch, &ffn_norm, /*accumulate=*/true);
      else RunDeviceMlp(L.mlp, hn, x, A.ffn_scratch, /*accumulate=*/true, &ffn_norm);
    }
    RunLogitHead({.residual = x, .logit_rows = fb.logit_rows,
                  .gathered = A.gathered, .normed = A.hn, .norm_weight = d_norm_,
                  .eps = b.rms_norm_eps, .output = d_output_, .logits = logits});
    last_tokens_ = n;
  }

  MoeModelConfig c_;
  std::unique_ptr<MoeWeights> w_;
  TensorView embed_, norm_, output_;
  std::vector<Layer> layers_;
  HostPackedModel<Layer> host_;  // PackHostWeights
  std::vector<float> x_, hn_, q_, qa_, kva_, qpe_, attn_, o_, ffn_, g_;  // grow-only
  FfnScratch scratch_;
  // Device copy (null device_: the model runs on the host).
  DeviceMemory* device_ = nullptr;
  TensorView d_embed_, d_norm_, d_output_;
  std::vector<DeviceLayer> d_layers_;
  DeviceActs d_;
  int64_t device_weight_bytes_ = 0;
  int64_t last_tokens_ = 0;  // tokens of the last device forward (its routes are kept)
  float last_routing_margin_ = std::numeric_limits<float>::infinity();  // last host forward
  bool fused_qkva_ = false;  // every layer's first projections are one matrix (wq_kva)
};

}  // namespace

std::unique_ptr<Model> CreateDeepseekV3(MoeModelConfig config, std::unique_ptr<MoeWeights> weights) {
  return std::make_unique<DeepseekV3Model>(std::move(config), std::move(weights));
}

std::unique_ptr<Model> CreateDeepseekV3OnDevice(MoeModelConfig config, DeviceMemory& memory,
                                                const DevicePlacement& placement, uint64_t seed,
                                                bool fp8) {
  config.Validate();
  auto model = std::make_unique<DeepseekV3Model>(std::move(config));
  model->Place(memory, placement, /*random=*/true, fp8, seed);
  return model;
}

}  // namespace pg::models
