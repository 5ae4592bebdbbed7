#include "models/llama.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "core/env.h"
#include "core/log.h"
#include "core/quant.h"
#include "core/status.h"
#include "kernels/ops_fused.h"
#include "kernels/ops_mega.h"
#include "kernels/ops_fused_attention.h"
#include "models/cpu_pack.h"
#include "models/device_weights.h"
#include "models/logit_head.h"

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

// The device copy of a layer: bf16 matrices, f32 norms and biases. Without q/k norm the
// q, k, v projections are one matrix [q + 2 kv, hidden] (one GEMV per layer instead of
// three); gate and up always are [2 * inter, hidden] (SwiGlu reads the concatenation).
struct DeviceLayer {
  TensorView attn_norm, ffn_norm, q_norm, k_norm;
  TensorView wqkv, bqkv;      // fused (when !qk_norm); bqkv optional
  TensorView wq, wk, wv;      // separate (when qk_norm); biases bq, bk, bv optional
  TensorView bq, bk, bv;
  TensorView wo, w_gate_up, w_down;
  // fp8 placement: each matrix's per-tensor scale (MatmulParams::w_scale; unset for bf16)
  TensorView wqkv_s, wq_s, wk_s, wv_s, wo_s, w_gate_up_s, w_down_s;
};

// Device activations for up to `capacity` tokens, bf16, carved once at placement.
struct DeviceScratch {
  int64_t capacity = 0;
  TensorView x, hn, qkv, q, k, v, attn, gate_up, act, gathered;
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

  // A model with no host weights: PlaceOnDevice(random) must follow before any Forward.
  explicit LlamaModel(ModelConfig config) : config_(std::move(config)) {
    attn_scale_ = 1.0f / std::sqrt(float(config_.head_dim)) * ops::RopeAttentionScale(config_.rope);
  }

  // PEREGRINE_MEGA_TRACE=1: the timeline of the last mega launch (ops_mega.h TraceReport).
  ~LlamaModel() override {
    if (!mega_) return;
    const std::string report = mega_->TraceReport();
    if (!report.empty()) PG_LOG_INFO("{}", report);
  }

  const ModelConfig& config() const override { return config_; }
  int64_t weight_bytes() const override {
    return on_device() ? device_weight_bytes_ : weights_->total_bytes();
  }
  bool on_device() const override { return device_ != nullptr; }
  int64_t streamed_weight_bytes() const override {
    if (!on_device()) return weight_bytes();
    const auto& c = config_;
    const bool tied = d_output_.data == d_embed_.data;
    // Every matrix but the input embedding (read by row) is read whole each step.
    return device_weight_bytes_ - (tied ? 0 : int64_t(c.vocab_size) * c.hidden_size * 2);
  }

  void PlaceOnDevice(DeviceMemory& memory, const DevicePlacement& placement) override {
    PG_ENSURE(weights_ != nullptr, kInvalidArgument, "model has no host weights to place");
    Place(memory, placement, /*random=*/false, 0);
  }

  // Allocates device weights (converted from the host store, or random) and scratch.
  void Place(DeviceMemory& memory, const DevicePlacement& placement, bool random, uint64_t seed) {
    PG_ENSURE(!on_device(), kInvalidArgument, "model is already on a device");
    PG_ENSURE(placement.max_batch_tokens > 0, kInvalidArgument,
              "device placement needs max_batch_tokens > 0");
    const auto& c = config_;
    const int64_t h = c.hidden_size, qd = int64_t(c.num_heads) * c.head_dim,
                  kvd = int64_t(c.num_kv_heads) * c.head_dim, f = c.intermediate_size,
                  vocab = c.vocab_size;
    DeviceWeightMaker mk(memory, random, seed);
    PG_ENSURE(placement.weight_dtype == DType::kBF16 || placement.weight_dtype == DType::kF8E4M3,
              kUnsupported, "device weights: {} (bf16 or fp8)", Name(placement.weight_dtype));
    const bool fp8 = placement.weight_dtype == DType::kF8E4M3;
    // A projection matrix: bf16, or fp8 with its per-tensor scale in `scale`.
    auto proj = [&](std::initializer_list<TensorView> parts, int64_t rows, int64_t cols,
                    TensorView& scale) {
      if (!fp8) return mk.Matrix(parts, rows, cols);
      const DeviceMatrix m = mk.Fp8TensorMatrix(parts, rows, cols);
      scale = m.scale;
      return m.w;
    };
    const bool untied = random ? !c.tie_word_embeddings : output_.data != embed_.data;
    d_embed_ = mk.Matrix({embed_}, vocab, h);
    d_output_ = untied ? mk.Matrix({output_}, vocab, h) : d_embed_;
    d_output_norm_ = mk.Vector({output_norm_}, h, 1.0f);
    const bool bias = random ? c.attention_bias : (!layers_.empty() && layers_[0].bq.data);
    d_layers_.resize(size_t(c.num_layers));
    for (int i = 0; i < c.num_layers; ++i) {
      const LayerWeights L = random ? LayerWeights{} : layers_[size_t(i)];
      DeviceLayer& D = d_layers_[size_t(i)];
      D.attn_norm = mk.Vector({L.attn_norm}, h, 1.0f);
      D.ffn_norm = mk.Vector({L.ffn_norm}, h, 1.0f);
      if (c.qk_norm) {
        D.q_norm = mk.Vector({L.q_norm}, c.head_dim, 1.0f);
        D.k_norm = mk.Vector({L.k_norm}, c.head_dim, 1.0f);
        D.wq = proj({L.wq}, qd, h, D.wq_s);
        D.wk = proj({L.wk}, kvd, h, D.wk_s);
        D.wv = proj({L.wv}, kvd, h, D.wv_s);
        if (bias) {
          D.bq = mk.Vector({L.bq}, qd, 0.0f);
          D.bk = mk.Vector({L.bk}, kvd, 0.0f);
          D.bv = mk.Vector({L.bv}, kvd, 0.0f);
        }
      } else {
        D.wqkv = proj({L.wq, L.wk, L.wv}, qd + 2 * kvd, h, D.wqkv_s);
        if (bias) D.bqkv = mk.Vector({L.bq, L.bk, L.bv}, qd + 2 * kvd, 0.0f);
      }
      D.wo = proj({L.wo}, h, qd, D.wo_s);
      D.w_gate_up = proj({L.w_gate, L.w_up}, 2 * f, h, D.w_gate_up_s);
      D.w_down = proj({L.w_down}, h, f, D.w_down_s);
    }
    device_weight_bytes_ = mk.bytes();
    const int64_t cap = placement.max_batch_tokens;
    DeviceScratch& S = d_;
    S.capacity = cap;
    S.x = mk.Activations(cap, h);
    S.hn = mk.Activations(cap, h);
    if (c.qk_norm) {
      S.q = mk.Activations(cap, qd);
      S.k = mk.Activations(cap, kvd);
      S.v = mk.Activations(cap, kvd);
    } else {
      S.qkv = mk.Activations(cap, qd + 2 * kvd);
    }
    S.attn = mk.Activations(cap, qd);
    S.gate_up = mk.Activations(cap, 2 * f);
    S.act = mk.Activations(cap, f);
    S.gathered = mk.Activations(cap, h);
    device_ = &memory;
    BuildMegaPlan();
  }

  // The persistent batch-1 decode kernel (ops_mega.h), when PEREGRINE_MEGA is on and the config
  // fits (fused qkv, bf16 weights, head_dim 128): steps 5l .. 5l + 4 are layer l's norm + qkv,
  // RoPE + KV write + attention, o (+= x), norm + gate_up + SwiGLU, down (+= x), on the
  // one-token rows of the scratch.
  void BuildMegaPlan() {
    const bool enabled = EnvFlag("PEREGRINE_MEGA", false);  // per placement: tests A/B it
    const auto& c = config_;
    if (!enabled || c.qk_norm || d_layers_.empty() || d_layers_[0].wqkv_s.data) return;
    const DeviceScratch& S = d_;
    const TensorView x = S.x.Slice0(0, 1), qkv = S.qkv.Slice0(0, 1), attn = S.attn.Slice0(0, 1),
                     act = S.act.Slice0(0, 1);
    std::vector<ops::MegaStepParams> steps;
    for (int li = 0; li < c.num_layers; ++li) {
      const DeviceLayer& L = d_layers_[size_t(li)];
      steps.push_back({.kind = ops::MegaStepKind::kNormProject, .x = x, .norm_weight = L.attn_norm,
                       .eps = c.rms_norm_eps, .w = L.wqkv, .bias = L.bqkv, .out = qkv});
      steps.push_back({.kind = ops::MegaStepKind::kAttention, .x = qkv, .out = attn, .layer = li,
                       .heads = c.num_heads, .kv_heads = c.num_kv_heads, .head_dim = c.head_dim,
                       .rope = c.rope, .scale = attn_scale_});
      steps.push_back({.kind = ops::MegaStepKind::kAccumulate, .x = attn, .w = L.wo, .out = x});
      steps.push_back({.kind = ops::MegaStepKind::kNormSwiGlu, .x = x, .norm_weight = L.ffn_norm,
                       .eps = c.rms_norm_eps, .w = L.w_gate_up, .out = act,
                       .projected = S.gate_up.Slice0(0, 1)});
      steps.push_back({.kind = ops::MegaStepKind::kAccumulate, .x = act, .w = L.w_down, .out = x});
    }
    // Attention runs as its own kernels between launches in the warp mode (the default,
    // mega_warp.cu: GEMV steps only) and with PEREGRINE_MEGA_ATTN=0; inside the one launch
    // with PEREGRINE_MEGA_WARP=0 (the ring kernel).
    mega_attention_ = EnvFlag("PEREGRINE_MEGA_ATTN", true) && !EnvFlag("PEREGRINE_MEGA_WARP", true);
    std::string why;
    mega_ = ops::MakeMegaPlan(steps, &why);
    if (mega_) PG_LOG_INFO("PEREGRINE_MEGA: persistent batch-1 decode kernel on");
    else PG_LOG_WARN("PEREGRINE_MEGA: persistent decode kernel not used: {}", why);
  }

  void Forward(const ForwardBatch& b, const KvCacheLayers& kv, TensorView logits) override {
    if (on_device()) return ForwardDevice(b, kv, logits);
    const auto& c = config_;
    const int64_t n = int64_t(b.tokens.size());
    const int64_t m = int64_t(b.logit_rows.size());
    PG_CHECK(b.positions.size() == b.tokens.size() && b.attention != nullptr);
    PG_CHECK(int(kv.layers.size()) == c.num_layers, "kv layers {}", kv.layers.size());
    PG_CHECK(logits.ndim == 2 && logits.dim(0) == m && logits.dim(1) == c.vocab_size,
             "logits {}", logits.ShapeString());
    if (n == 0) return;
    PackHostWeights();
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
      const LayerWeights& L = host_.layer(li);
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
    RunLogitHead({.residual = x, .last = pending, .logit_rows = b.logit_rows,
                  .gathered = s_.gathered.view(),
                  .normed = s_.hn.view(), .norm_weight = output_norm_,
                  .eps = c.rms_norm_eps, .output = host_.output(), .logits = logits});
  }

 private:
  void PrepareHost() override {
    if (!on_device()) PackHostWeights();
  }

  // The host forward's matrices (host_, cpu_pack.h), made on the first host forward.
  void PackHostWeights() {
    host_.Prepare(layers_, output_, [](LayerWeights& L, CpuPackedWeights& p) {
      for (TensorView* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) p.Add(w);
    });
  }

  // The device path: the same computation in bf16 on device buffers (weights and scratch at
  // fixed addresses, so the runtime can capture it in a CUDA graph). Host work here is only
  // validation and launches; nothing synchronises except Embedding outside capture.
  void ForwardDevice(const ForwardBatch& b, const KvCacheLayers& kv, TensorView logits) {
    const auto& c = config_;
    const int64_t n = int64_t(b.tokens.size());
    const int64_t m = int64_t(b.logit_rows.size());
    PG_CHECK(b.positions.size() == b.tokens.size() && b.attention != nullptr);
    PG_CHECK(int(kv.layers.size()) == c.num_layers, "kv layers {}", kv.layers.size());
    PG_CHECK(logits.ndim == 2 && logits.dim(0) == m && logits.dim(1) == c.vocab_size &&
                 logits.dtype == DType::kBF16 && logits.device == device_->device(),
             "device logits {}", logits.ShapeString());
    PG_CHECK(b.device_tokens.data && b.device_tokens.numel() == n && b.device_positions.data &&
                 b.device_positions.numel() == n,
             "device path needs device_tokens/device_positions of {} tokens", n);
    if (n == 0) return;
    const ops::MegaRunInputs mega_in{.batch = b.attention, .caches = kv.layers};
    if (mega_ && n == 1 && ops::MegaAttentionFits(mega_in)) return ForwardMega(b, mega_in, logits);
    PG_ENSURE(n <= d_.capacity, kInvalidArgument,
              "batch of {} tokens exceeds the device scratch ({} tokens)", n, d_.capacity);
    // Ids are checked here: under graph capture the embedding kernel cannot report.
    for (int32_t t : b.tokens)
      PG_ENSURE(t >= 0 && t < c.vocab_size, kOutOfRange, "token id {} outside vocab [0, {})", t,
                c.vocab_size);
    const int64_t h = c.hidden_size, nh = c.num_heads, nkv = c.num_kv_heads, hd = c.head_dim,
                  f = c.intermediate_size, qd = nh * hd, kvd = nkv * hd;
    const DeviceScratch& S = d_;
    TensorView x = S.x.Slice0(0, n), hn = S.hn.Slice0(0, n), attn = S.attn.Slice0(0, n),
               gate_up = S.gate_up.Slice0(0, n), act = S.act.Slice0(0, n);
    // [n, heads, head_dim] views; with fused qkv they are column ranges of one [n, qd+2kvd]
    // buffer (row stride qd + 2 kvd).
    auto heads3 = [n, hd](const TensorView& base, int64_t col, int64_t heads) {
      TensorView v = base;
      v.data = static_cast<uint16_t*>(base.data) + col;
      v.ndim = 3;
      v.shape = {n, heads, hd};
      v.strides = {base.strides[0], hd, 1};
      return v;
    };
    const bool fused = !c.qk_norm;
    TensorView qkv = fused ? S.qkv.Slice0(0, n) : TensorView{};
    TensorView q = fused ? TensorView{} : S.q.Slice0(0, n), k = fused ? TensorView{} : S.k.Slice0(0, n),
               v = fused ? TensorView{} : S.v.Slice0(0, n);
    TensorView q3 = fused ? heads3(qkv, 0, nh) : heads3(q, 0, nh);
    TensorView k3 = fused ? heads3(qkv, qd, nkv) : heads3(k, 0, nkv);
    TensorView v3 = fused ? heads3(qkv, qd + kvd, nkv) : heads3(v, 0, nkv);
    TensorView attn3 = heads3(attn, 0, nh);

    // x is the residual stream throughout: each sub-layer's output projection accumulates
    // into it (Matmul accumulate: one bf16 rounding of x + y), and each RMSNorm is fused into
    // the projection that reads it (FusedMatmul: one kernel at decode batch sizes, the
    // unfused ops otherwise), SwiGLU into the gate/up projection.
    ops::Embedding({.table = d_embed_, .ids = b.device_tokens, .out = x});
    for (int li = 0; li < c.num_layers; ++li) {
      const DeviceLayer& L = d_layers_[size_t(li)];
      if (fused) {
        ops::FusedMatmul({.x = x, .norm_weight = L.attn_norm, .eps = c.rms_norm_eps, .w = L.wqkv,
                          .bias = L.bqkv, .w_scale = L.wqkv_s, .out = qkv, .normed = hn});
      } else {
        // Separate q, k, v (q/k norm): each projection recomputes the row norm (cheap).
        for (auto [w, bias, scale, out] : {std::tuple{L.wq, L.bq, L.wq_s, q},
                                           std::tuple{L.wk, L.bk, L.wk_s, k},
                                           std::tuple{L.wv, L.bv, L.wv_s, v}})
          ops::FusedMatmul({.x = x, .norm_weight = L.attn_norm, .eps = c.rms_norm_eps, .w = w,
                            .bias = bias, .w_scale = scale, .out = out, .normed = hn});
      }
      const ops::KvCacheView& cache = kv.layers[size_t(li)];
      // (Qwen3: per-head q/k RMSNorm,) RoPE on q and k, k and v into the (bf16 or fp8) cache,
      // then attention: one kernel each, or (PEREGRINE_FUSED_ATTN, small decode batches) one
      // kernel for both (ops_fused_attention.h; q and k are scratch afterwards).
      const ops::RopeKvWriteParams rope{.q = q3, .k = k3, .v = v3, .positions = b.device_positions,
                                        .config = c.rope, .cache = cache, .batch = b.attention,
                                        .q_norm = L.q_norm, .k_norm = L.k_norm,
                                        .norm_eps = c.rms_norm_eps};
      if (ops::FusedAttentionEnabled()) {
        ops::RopeKvWriteAttention(
            {.rope = rope, .out = attn3, .scale = attn_scale_, .l2_after = L.wo});
      } else {
        ops::RopeKvWrite(rope);
        ops::Attention({.q = q3, .out = attn3, .cache = cache, .batch = b.attention,
                        .scale = attn_scale_});
      }
      ops::Matmul({.x = attn, .w = L.wo, .out = x, .w_scale = L.wo_s, .accumulate = true});
      ops::FusedMatmul({.x = x, .norm_weight = L.ffn_norm, .eps = c.rms_norm_eps,
                        .w = L.w_gate_up, .w_scale = L.w_gate_up_s, .swiglu = true, .out = act,
                        .normed = hn, .projected = gate_up});
      ops::Matmul({.x = act, .w = L.w_down, .out = x, .w_scale = L.w_down_s, .accumulate = true});
    }
    RunLogitHead({.residual = x, .logit_rows = b.logit_rows, .gathered = S.gathered,
                  .normed = S.hn, .norm_weight = d_output_norm_, .eps = c.rms_norm_eps,
                  .output = d_output_, .logits = logits});
    (void)h, (void)f;
  }

  // One decode token through the persistent kernel (BuildMegaPlan): embedding, ONE launch for
  // every layer, the logit head. PEREGRINE_MEGA_ATTN=0 (A/B) runs attention as the separate
  // RopeKvWrite + Attention kernels instead, the projections in launches between them.
  void ForwardMega(const ForwardBatch& b, const ops::MegaRunInputs& in, TensorView logits) {
    const auto& c = config_;
    PG_ENSURE(b.tokens[0] >= 0 && b.tokens[0] < c.vocab_size, kOutOfRange,
              "token id {} outside vocab [0, {})", b.tokens[0], c.vocab_size);
    const DeviceScratch& S = d_;
    const TensorView x = S.x.Slice0(0, 1);
    ops::Embedding({.table = d_embed_, .ids = b.device_tokens, .out = x});
    const int steps = mega_->num_steps();
    if (mega_attention_) {
      mega_->Run(0, steps, in);
    } else {
      const int64_t hd = c.head_dim, qd = c.num_heads * hd, kvd = c.num_kv_heads * hd;
      const TensorView qkv = S.qkv.Slice0(0, 1);
      auto heads3 = [&](int64_t col, int64_t heads) {
        TensorView v = qkv;
        v.data = static_cast<uint16_t*>(qkv.data) + col;
        v.ndim = 3;
        v.shape = {1, heads, hd};
        v.strides = {qkv.strides[0], hd, 1};
        return v;
      };
      TensorView attn3 = S.attn.Slice0(0, 1).Reshape({1, c.num_heads, hd});
      mega_->Run(0, 1);
      for (int li = 0; li < c.num_layers; ++li) {
        const ops::KvCacheView& cache = in.caches[size_t(li)];
        ops::RopeKvWrite({.q = heads3(0, c.num_heads), .k = heads3(qd, c.num_kv_heads),
                          .v = heads3(qd + kvd, c.num_kv_heads), .positions = b.device_positions,
                          .config = c.rope, .cache = cache, .batch = b.attention});
        ops::Attention({.q = heads3(0, c.num_heads), .out = attn3, .cache = cache,
                        .batch = b.attention, .scale = attn_scale_});
        mega_->Run(5 * li + 2, std::min(5 * li + 6, steps));  // o .. next layer's qkv
      }
    }
    RunLogitHead({.residual = x, .logit_rows = b.logit_rows, .gathered = S.gathered,
                  .normed = S.hn, .norm_weight = d_output_norm_, .eps = c.rms_norm_eps,
                  .output = d_output_, .logits = logits});
  }

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
  HostPackedModel<LayerWeights> host_;  // PackHostWeights
  float attn_scale_ = 1.0f;
  Scratch s_;
  // Device copy (null device_: the model runs on the host).
  DeviceMemory* device_ = nullptr;
  TensorView d_embed_, d_output_norm_, d_output_;
  std::vector<DeviceLayer> d_layers_;
  DeviceScratch d_;
  std::unique_ptr<ops::MegaPlan> mega_;  // set by BuildMegaPlan (PEREGRINE_MEGA)
  bool mega_attention_ = true;           // attention inside the mega launch
  int64_t device_weight_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Model> CreateLlama(ModelConfig config, std::unique_ptr<WeightStore> weights) {
  return std::make_unique<LlamaModel>(std::move(config), std::move(weights));
}

std::unique_ptr<Model> CreateDummyModelOnDevice(const ModelConfig& config, DeviceMemory& memory,
                                                const DevicePlacement& placement, uint64_t seed) {
  config.Validate();
  auto model = std::make_unique<LlamaModel>(config);
  model->Place(memory, placement, /*random=*/true, seed);
  return model;
}

}  // namespace pg::models
