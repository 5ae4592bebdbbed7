#include "core/env.h"
#include "models/moe_device.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/status.h"
#include "kernels/ops.h"
#include "kernels/ops_fused.h"
#include "kernels/registry.h"

namespace pg::models {
namespace {

// [rows, cols] packed view at the start of a scratch buffer (rows * cols <= its size).
TensorView Flat(const TensorView& buf, int64_t rows, int64_t cols) {
  PG_CHECK(rows * cols <= buf.numel(), "scratch {} too small for [{}, {}]", buf.ShapeString(),
           rows, cols);
  return TensorView::Contiguous(buf.data, buf.dtype, {rows, cols}, buf.device);
}

// The op-level view of one expert (ops_moe.h). fp8 experts carry their block scales.
ops::MoeExpertWeights ExpertView(const DeviceMatrix& gate, const DeviceMatrix& up,
                                 const DeviceMatrix& down) {
  ops::MoeExpertWeights e;
  e.gate = gate.w;
  e.up = up.w;
  e.down = down.w;
  e.gate_scale = gate.scale;
  e.up_scale = up.scale;
  e.down_scale = down.scale;
  return e;
}

// A/B switches of the decode fusions (read once). PEREGRINE_MOE_FUSED_ROUTER=1 fuses the
// FFN's RMSNorm and the router matmul into MoeRouter (off by default: on the H200 RmsNorm +
// GEMV + router measured faster with PDL, Qwen3-30B-A3B batch 1 step 3559 vs 3761 us with the
// arrival-counter kernel, 3852 us with a one-cluster kernel since dropped);
// PEREGRINE_MOE_FUSED_SHARED=0 runs the shared expert as its own MLP instead of inside
// MoeExperts (on by default: Moonlight batch 1 step 2662 vs 2737 us).
bool FuseRouter() {
  static const bool on = EnvFlag("PEREGRINE_MOE_FUSED_ROUTER", false);
  return on;
}
bool FuseShared() {
  static const bool on = EnvFlag("PEREGRINE_MOE_FUSED_SHARED", true);
  return on;
}
// PEREGRINE_MOE_SELF_ROUTE (1 by default): the routing inside MoeExperts
// (MoeExpertsParams::route). 1: with the router matmul (and the FFN's RMSNorm, without a
// residual) in the route — CUDA: one kernel computes the normed rows and logits in registers
// (moe_router.cu NormLogitsKernel), the logits-form router kernel routes (or, with
// PEREGRINE_MOE_GU_ROUTES=1, every walking gate/up block); 2: RmsNorm and the router Matmul as
// their own ops first; 0: MoeRouter's own kernel (fused as PEREGRINE_MOE_FUSED_ROUTER says).
// One token only. H200 batch 1 step, same run: Qwen3-30B-A3B 3358 (mode 1) vs 3531 us (mode 0),
// DeepSeek-V2-Lite 2050 vs 2150, Moonlight 2136 vs 2228; gate/up blocks routing 3482 / 2060 /
// 2153. At 4 tokens gate/up routing measured slower (7788 vs 7492 us: several waves of
// blocks, each paying the routing).
int SelfRoute() {
  static const int mode = EnvInt("PEREGRINE_MOE_SELF_ROUTE", 1);
  return mode;
}

}  // namespace

bool MoeDeviceSource::IsFp8(const std::string& name) {
  if (!host_) return random_fp8_;
  return host_->IsStoredFp8(name);
}

DeviceMatrix MoeDeviceSource::Linear(const std::string& name, int64_t rows, int64_t cols) {
  if (!host_) {
    if (random_fp8_) return mk_.Fp8Matrix({}, {}, rows, cols);
    return {mk_.Matrix({}, rows, cols), {}};
  }
  const MoeWeights::Stored s = host_->GetStored(name, {rows, cols});
  // The device kernels take DeepSeek's 128x128 blocks; other block sizes go to bf16.
  if (s.scale_inv.data && host_->block_rows() == kFp8BlockSize &&
      host_->block_cols() == kFp8BlockSize)
    return mk_.Fp8Matrix(s.w, s.scale_inv, rows, cols);
  return {Bf16(name, rows, cols), {}};
}

TensorView MoeDeviceSource::Bf16(const std::string& name, int64_t rows, int64_t cols,
                                 std::span<const float> row_scale) {
  if (!host_) return mk_.Matrix({}, rows, cols);
  const TensorView v = host_->Get(name, {rows, cols});  // fp8 comes back dequantized (f32)
  return mk_.Matrix(std::span<const TensorView>(&v, 1), rows, cols, row_scale);
}

TensorView MoeDeviceSource::Bf16Concat(const std::vector<std::string>& names,
                                       const std::vector<int64_t>& rows, int64_t cols) {
  PG_CHECK(names.size() == rows.size(), "names {} rows {}", names.size(), rows.size());
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  if (!host_) return mk_.Matrix({}, total, cols);
  std::vector<TensorView> parts;
  parts.reserve(names.size());
  for (size_t i = 0; i < names.size(); ++i) parts.push_back(host_->Get(names[i], {rows[i], cols}));
  return mk_.Matrix(parts, total, cols);
}

bool MoeDeviceSource::CanConcat(const std::vector<std::string>& names) {
  if (!host_) return true;
  for (const std::string& n : names)
    if (host_->IsStoredFp8(n)) return false;
  return true;
}

DeviceMatrix MoeDeviceSource::LinearConcat(const std::vector<std::string>& names,
                                           const std::vector<int64_t>& rows, int64_t cols,
                                           std::span<const float> row_scale) {
  PG_CHECK(names.size() == rows.size() && CanConcat(names), "LinearConcat of {} names",
           names.size());
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  if (!host_) {
    if (random_fp8_) return mk_.Fp8Matrix({}, {}, total, cols);
    return {mk_.Matrix({}, total, cols), {}};
  }
  std::vector<TensorView> parts;
  for (size_t i = 0; i < names.size(); ++i) parts.push_back(host_->Get(names[i], {rows[i], cols}));
  return {mk_.Matrix(parts, total, cols, row_scale), {}};
}

TensorView MoeDeviceSource::Vector(const std::string& name, int64_t n, float mean) {
  if (!host_) return mk_.Vector({}, n, mean);
  return mk_.Vector({host_->GetF32(name, {n}, mean)}, n, mean);
}

DeviceMlp PlaceMlp(MoeDeviceSource& src, const std::string& p, int64_t hidden, int64_t inter) {
  DeviceMlp m;
  m.inter = inter;
  const std::string g = p + "gate_proj.weight", u = p + "up_proj.weight";
  if (src.IsFp8(g)) {
    m.gate = src.Linear(g, inter, hidden);
    m.up = src.Linear(u, inter, hidden);
  } else {
    m.gate_up = src.Bf16Concat({g, u}, {inter, inter}, hidden);
    m.gate.w = m.gate_up.Slice0(0, inter);
    m.up.w = m.gate_up.Slice0(inter, inter);
  }
  m.down = src.Linear(p + "down_proj.weight", hidden, inter);
  return m;
}

DeviceMoeFfn PlaceMoeFfn(MoeDeviceSource& src, const std::string& p, const MoeModelConfig& c,
                         int64_t capacity) {
  const int64_t h = c.base.hidden_size, ne = c.num_experts, inter = c.moe_intermediate_size;
  DeviceMoeFfn f;
  f.router = src.Bf16(p + "gate.weight", ne, h);
  if (c.has_score_bias) f.score_bias = src.Vector(p + "gate.e_score_correction_bias", ne, 0.0f);
  auto name = [&](int64_t e, const char* proj) {
    return p + "experts." + std::to_string(e) + "." + proj + ".weight";
  };
  f.gate.resize(size_t(ne)), f.up.resize(size_t(ne)), f.down.resize(size_t(ne));
  if (src.IsFp8(name(0, "gate_proj"))) {
    for (int64_t e = 0; e < ne; ++e) {
      f.gate[size_t(e)] = src.Linear(name(e, "gate_proj"), inter, h);
      f.up[size_t(e)] = src.Linear(name(e, "up_proj"), inter, h);
      f.down[size_t(e)] = src.Linear(name(e, "down_proj"), h, inter);
    }
  } else {
    // One allocation per layer for all gate/up rows ([ne * 2 * inter, h]: expert e's gate
    // then its up) and one for all down rows ([ne * h, inter]).
    std::vector<std::string> gu, dn;
    for (int64_t e = 0; e < ne; ++e) {
      gu.push_back(name(e, "gate_proj"));
      gu.push_back(name(e, "up_proj"));
      dn.push_back(name(e, "down_proj"));
    }
    const TensorView all_gu = src.Bf16Concat(gu, std::vector<int64_t>(gu.size(), inter), h);
    const TensorView all_dn = src.Bf16Concat(dn, std::vector<int64_t>(dn.size(), h), inter);
    for (int64_t e = 0; e < ne; ++e) {
      f.gate[size_t(e)].w = all_gu.Slice0(2 * e * inter, inter);
      f.up[size_t(e)].w = all_gu.Slice0((2 * e + 1) * inter, inter);
      f.down[size_t(e)].w = all_dn.Slice0(e * h, h);
    }
  }
  for (int64_t e = 0; e < ne; ++e)
    f.experts.push_back(ExpertView(f.gate[size_t(e)], f.up[size_t(e)], f.down[size_t(e)]));
  f.expert_bytes = f.gate[0].bytes() + f.up[0].bytes() + f.down[0].bytes();
  if (c.num_shared_experts > 0)
    f.shared = PlaceMlp(src, p + "shared_experts.", h, inter * c.num_shared_experts);
  f.topk_ids = src.maker().Buffer(DType::kI32, capacity, c.top_k);
  return f;
}

DeviceFfnScratch PlaceFfnScratch(DeviceWeightMaker& mk, const MoeModelConfig& c,
                                 int64_t capacity) {
  const int64_t inter =
      std::max<int64_t>({c.base.intermediate_size, c.moe_intermediate_size,
                         int64_t(c.moe_intermediate_size) * c.num_shared_experts});
  DeviceFfnScratch s;
  // f32 router logits (as HF computes them): bf16 rounding of the logits alone flips expert
  // choices between experts whose scores are within ~0.4%.
  s.router_logits = mk.Buffer(DType::kF32, capacity, std::max(c.num_experts, 1));
  s.topk_weights = mk.Buffer(DType::kF32, capacity, std::max(c.top_k, 1));
  s.gate_up = mk.Activations(capacity, 2 * inter);
  s.act = mk.Activations(capacity, inter);
  return s;
}

void DeviceMatmul(const TensorView& x, const DeviceMatrix& w, const TensorView& out,
                  bool accumulate) {
  ops::Matmul({.x = x, .w = w.w, .out = out, .w_scale = w.scale, .accumulate = accumulate});
}

void RunDeviceMlp(const DeviceMlp& w, const TensorView& x, const TensorView& out,
                  const DeviceFfnScratch& s, bool accumulate, const FfnNorm* norm) {
  const int64_t n = x.dim(0), inter = w.inter;
  const TensorView gu = Flat(s.gate_up, n, 2 * inter), act = Flat(s.act, n, inter);
  if (w.gate_up.data && !(norm && norm->residual.data)) {
    // (RMSNorm +) gate_up projection + SwiGLU: one kernel at GEMV sizes (ops_fused.h).
    ops::FusedMatmulParams fp{.x = x, .w = w.gate_up, .swiglu = true, .out = act, .projected = gu};
    if (norm) {
      fp.x = norm->x;
      fp.norm_weight = norm->weight;
      fp.eps = norm->eps;
      fp.normed = x;
    }
    ops::FusedMatmul(fp);
    DeviceMatmul(act, w.down, out, accumulate);
    return;
  }
  if (norm)
    ops::RmsNorm({.x = norm->x, .weight = norm->weight, .out = x, .residual = norm->residual,
                  .eps = norm->eps});
  if (w.gate_up.data) {
    ops::Matmul({.x = x, .w = w.gate_up, .out = gu});
  } else {
    // fp8: gate and up into the two column halves of gu (row stride 2 * inter).
    DeviceMatmul(x, w.gate, Columns(gu, 0, inter));
    DeviceMatmul(x, w.up, Columns(gu, inter, inter));
  }
  ops::SwiGlu({.gate = gu, .out = act});
  DeviceMatmul(act, w.down, out, accumulate);
}

void RunDeviceMoeFfn(const DeviceMoeFfn& w, const MoeModelConfig& c, const TensorView& x,
                     const TensorView& out, const DeviceFfnScratch& s, const FfnNorm* norm,
                     bool accumulate) {
  const int64_t n = x.dim(0);
  const TensorView logits = Flat(s.router_logits, n, c.num_experts);
  const TensorView weights = Flat(s.topk_weights, n, c.top_k);
  const TensorView ids = w.topk_ids.Slice0(0, n);
  const ops::RmsNormParams np =
      norm ? ops::RmsNormParams{.x = norm->x, .weight = norm->weight, .out = x,
                                .residual = norm->residual, .eps = norm->eps}
           : ops::RmsNormParams{};
  ops::MoeRouterParams rp{.logits = logits, .bias = w.score_bias, .topk_ids = ids,
                          .topk_weights = weights, .scoring = c.scoring, .num_groups = c.n_group,
                          .topk_groups = c.topk_group, .renormalize = c.norm_topk_prob,
                          .scaling = c.routed_scaling_factor};
  ops::MoeExpertsParams ep{.x = x, .topk_ids = ids, .topk_weights = weights,
                           .experts = w.experts, .out = out, .accumulate = accumulate,
                           .l2_after = w.l2_after};
  const bool decode = n <= kMoeDecodeFuseMaxTokens;
  const bool shared = w.shared.inter > 0;
  if (shared && decode && FuseShared()) {
    // The shared expert inside the experts op (CUDA: extra slots of the walking kernels),
    // where the backend takes it.
    ep.shared = ExpertView(w.shared.gate, w.shared.up, w.shared.down);
    if (ops::Registry::Global().Selected(ep) == nullptr) ep.shared = {};
  }
  const bool shared_apart = shared && !ep.shared.gate.data;  // its own MLP, on the normed x
  const int self_route = decode ? SelfRoute() : 0;
  // Routing inside the experts op; mode 1 with the router matmul (+ the RMSNorm, when it has
  // no residual and no separate shared MLP needs the normed x first) too.
  const bool route_matmul = self_route == 1 && !shared_apart && !(norm && norm->residual.data);
  // The router op's own input: (RMSNorm +) router matmul inside it (residual: empty when
  // route_matmul, by its condition).
  auto router_takes_input = [&] {
    rp.x = norm ? norm->x : x;
    rp.router = w.router;
    if (norm) {
      rp.norm_weight = norm->weight;
      rp.normed = x;
      rp.residual = norm->residual;
      rp.norm_eps = norm->eps;
    }
  };
  // Or the logits from their own ops.
  auto norm_then_logits = [&] {
    if (norm) ops::RmsNorm(np);
    ops::Matmul({.x = x, .w = w.router, .out = logits});
  };
  if (self_route > 0) {
    if (route_matmul) router_takes_input();
    else norm_then_logits();
    ep.route = &rp;
    if (ops::Registry::Global().Selected(ep) == nullptr) {
      ops::MoeRouter(rp);  // the same routing as its own op
      ep.route = nullptr;
    }
  } else {
    // (RMSNorm +) router matmul + routing in one op (one kernel on CUDA) when fused.
    bool fused = false;
    if (decode && FuseRouter()) {
      router_takes_input();
      fused = ops::Registry::Global().Selected(rp) != nullptr;
    }
    if (!fused) {
      rp.x = rp.router = rp.norm_weight = rp.normed = rp.residual = TensorView{};
      norm_then_logits();
    }
    ops::MoeRouter(rp);
  }
  if (shared_apart) RunDeviceMlp(w.shared, x, out, s, accumulate);
  ep.accumulate = accumulate || shared_apart;
  ops::MoeExperts(ep);
}

void CheckDeviceBatch(const ForwardBatch& fb, const KvCacheLayers& kv, const TensorView& logits,
                      const ModelConfig& c, const DeviceMemory& mem, int64_t capacity) {
  const int64_t n = int64_t(fb.tokens.size()), m = int64_t(fb.logit_rows.size());
  PG_CHECK(fb.positions.size() == fb.tokens.size() && fb.attention != nullptr);
  PG_CHECK(int(kv.layers.size()) == c.num_layers, "kv layers {}", kv.layers.size());
  PG_CHECK(logits.ndim == 2 && logits.dim(0) == m && logits.dim(1) == c.vocab_size &&
               logits.dtype == DType::kBF16 && logits.device == mem.device(),
           "device logits {}", logits.ShapeString());
  PG_CHECK(fb.device_tokens.data && fb.device_tokens.numel() == n && fb.device_positions.data &&
               fb.device_positions.numel() == n,
           "device path needs device_tokens/device_positions of {} tokens", n);
  PG_ENSURE(n <= capacity, kInvalidArgument,
            "batch of {} tokens exceeds the device scratch ({} tokens)", n, capacity);
  for (int32_t t : fb.tokens)
    PG_ENSURE(t >= 0 && t < c.vocab_size, kOutOfRange, "token id {} outside vocab [0, {})", t,
              c.vocab_size);
}

int64_t CountDistinctExperts(std::span<const int32_t> ids, int num_experts) {
  std::vector<bool> seen(static_cast<size_t>(std::max(num_experts, 0)), false);
  int64_t distinct = 0;
  for (int32_t e : ids) {
    if (e < 0 || e >= num_experts || seen[size_t(e)]) continue;
    seen[size_t(e)] = true;
    ++distinct;
  }
  return distinct;
}

int64_t TouchedExpertBytes(const DeviceMoeFfn& w, int64_t num_tokens, int top_k,
                           DeviceMemory& mem) {
  if (num_tokens <= 0) return 0;
  std::vector<int32_t> ids(static_cast<size_t>(num_tokens * top_k));
  mem.CopyToHost(ids.data(), w.topk_ids.data, ids.size() * 4);
  return CountDistinctExperts(ids, int(w.experts.size())) * w.expert_bytes;
}

}  // namespace pg::models
