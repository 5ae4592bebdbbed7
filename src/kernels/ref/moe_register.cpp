// Validation, dispatch entry points and registration of the ops of ops_moe.h.
#include <fmt/format.h>

#include "core/quant.h"
#include "core/status.h"
#include "kernels/ops_moe.h"
#include "kernels/ref/moe_kernels.h"
#include "kernels/registry.h"
#include "kernels/validate.h"

namespace pg::ops {
namespace {


// Row-packed f32 tensor of `ndim` dims (dim 0 may be strided), CPU activations.
void NeedF32(std::string_view op, const char* name, const TensorView& t, int ndim) {
  PG_OP_NEED(t.ndim == ndim && t.dtype == DType::kF32 && (t.data != nullptr || t.numel() == 0), op, "{} must be a {}-D f32 tensor, got {}", name, ndim, t.ShapeString());
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 1; --i) {
    PG_OP_NEED(t.shape[i] == 1 || t.strides[i] == stride, op, "{} {} must have packed rows", name, t.ShapeString());
    stride *= t.shape[i];
  }
}

// An activation: f32 on the CPU, bf16 on CUDA (ops.h), packed rows.
void NeedAct(std::string_view op, const char* name, const TensorView& t, int ndim) {
  if (t.device == Device::kCuda && t.dtype == DType::kBF16) {
    TensorView as_f32 = t;  // same layout checks
    as_f32.dtype = DType::kF32;
    NeedF32(op, name, as_f32, ndim);
  } else {
    NeedF32(op, name, t, ndim);
  }
}

void NeedWeight(std::string_view op, const std::string& name, const TensorView& w, int64_t rows,
                int64_t cols) {
  PG_OP_NEED(w.ndim == 2 && w.data && w.strides[1] == 1 &&
           (quant::CanDequantize(w.dtype) || (IsRows4(w.dtype) && w.is_contiguous())) &&
           w.dim(0) == rows && w.dim(1) == cols, op, "{} must be a [{}, {}] row-major dequantizable matrix, got {}", name, rows,
                       cols, w.ShapeString());
}

// fp8 e4m3 weights need f32 scales [1], [rows] or [ceil(rows/128), ceil(cols/128)]; other
// dtypes none (ops_moe.h, MoeExpertWeights).
void NeedScale(std::string_view op, const std::string& name, const TensorView& w,
               const TensorView& s) {
  if (w.dtype != DType::kF8E4M3) {
    PG_OP_NEED(!s.data, op, "{}: scales are for fp8 e4m3 weights only, got {}", name, w.ShapeString());
    return;
  }
  const int64_t m = w.dim(0), k = w.dim(1);
  const bool shape_ok = (s.ndim == 1 && (s.dim(0) == 1 || s.dim(0) == m)) ||
                        (s.ndim == 2 && s.dim(0) == (m + 127) / 128 && s.dim(1) == (k + 127) / 128);
  PG_OP_NEED(s.data && s.dtype == DType::kF32 && s.is_contiguous() && shape_ok &&
                 s.device == w.device, op,
             "{}: fp8 weight {} needs f32 scales [1], [{}] or [{}, {}] on its device, got {}",
             name, w.ShapeString(), m, (m + 127) / 128, (k + 127) / 128, s.ShapeString());
}

// The latent cache and batch are checked as a KvWrite of [num_tokens, 1, half] rows would be
// (pages, page table, token counts), through that op's validation.
void ValidateLatentCache(std::string_view op, const KvCacheView& cache, const AttentionBatch* b,
                         int64_t num_tokens, int64_t latent_dim, void* any_ptr) {
  const int64_t half = (latent_dim + 1) / 2;
  PG_OP_NEED(cache.k_cache.ndim == 4 && cache.k_cache.dim(2) == 1 && cache.k_cache.dim(3) == half, op, "latent cache must be [pages, page_size, 1, {}] (latent dim {}), got {}",
                   half, latent_dim, cache.k_cache.ShapeString());
  PG_OP_NEED(cache.k_cache.device == Device::kCpu || cache.k_cache.device == Device::kCuda, op, "device");
  static float dummy = 0.0f;
  void* ptr = any_ptr ? any_ptr : &dummy;
  TensorView rows = TensorView::Contiguous(ptr, DType::kF32, {num_tokens, 1, half});
  rows.device = cache.k_cache.device;
  // fp8 e4m3 latent caches (per-tensor k_scale / v_scale) are checked as bf16 ones would be.
  KvCacheView as_kv = cache;
  if (cache.k_cache.dtype == DType::kF8E4M3 && cache.v_cache.dtype == DType::kF8E4M3) {
    PG_OP_NEED(cache.k_scale > 0.0f && cache.v_scale > 0.0f, op, "fp8 latent cache scales must be > 0");
    as_kv.k_cache.dtype = as_kv.v_cache.dtype = DType::kBF16;
  }
  try {
    Validate(KvWriteParams{.k = rows, .v = rows, .cache = as_kv, .batch = b});
  } catch (const Error& e) {
    Throw(ErrorCode::kInvalidArgument, "{} (latent cache): {}", op, e.what());
  }
}

}  // namespace

void Validate(const MoeRouterParams& p) {
  constexpr std::string_view op = "MoeRouter";
  NeedAct(op, "logits", p.logits, 2);
  NeedF32(op, "topk_weights", p.topk_weights, 2);
  PG_OP_NEED(p.topk_ids.ndim == 2 && p.topk_ids.dtype == DType::kI32 && p.topk_ids.is_contiguous() &&
           p.topk_ids.data, op, "topk_ids must be a contiguous 2-D i32 tensor, got {}",
                       p.topk_ids.ShapeString());
  const int64_t n = p.logits.dim(0), e = p.logits.dim(1), k = p.topk_ids.dim(1);
  PG_OP_NEED(p.topk_ids.dim(0) == n && p.topk_weights.dim(0) == n && p.topk_weights.dim(1) == k, op, "topk_ids {} / topk_weights {} must be [{}, top_k]", p.topk_ids.ShapeString(),
                   p.topk_weights.ShapeString(), n);
  PG_OP_NEED(p.num_groups >= 1 && e % p.num_groups == 0, op, "num_groups {} must divide num_experts {}", p.num_groups, e);
  PG_OP_NEED(p.topk_groups >= 1 && p.topk_groups <= p.num_groups, op, "topk_groups {} must be in [1, num_groups {}]", p.topk_groups, p.num_groups);
  PG_OP_NEED(k >= 1 && k <= int64_t(p.topk_groups) * (e / p.num_groups), op, "top_k {} must be in [1, {}] (topk_groups {} x {} experts per group)", k,
                   int64_t(p.topk_groups) * (e / p.num_groups), p.topk_groups, e / p.num_groups);
  if (p.bias.data)
    PG_OP_NEED(p.bias.ndim == 1 && p.bias.dim(0) == e && p.bias.dtype == DType::kF32 &&
             p.bias.is_contiguous(), op, "bias {} must be [{}] f32", p.bias.ShapeString(), e);
  PG_OP_NEED(!p.x.data == !p.router.data, op, "x and router must be given together");
  if (p.x.data) {
    NeedAct(op, "x", p.x, 2);
    PG_OP_NEED(p.x.dim(0) == n && p.logits.dtype == DType::kF32, op,
               "fused router: x {} must have {} rows and logits {} must be f32",
               p.x.ShapeString(), n, p.logits.ShapeString());
    NeedWeight(op, "router", p.router, e, p.x.dim(1));
  }
  PG_OP_NEED(p.x.data || (!p.norm_weight.data && !p.residual.data), op,
             "norm_weight / residual need the fused router (x)");
  PG_OP_NEED(!p.residual.data || p.norm_weight.data, op, "residual needs norm_weight");
  if (p.norm_weight.data) {
    PG_OP_NEED(p.normed.data, op, "norm_weight needs normed (the normalised rows, an output)");
    // The fused norm is exactly RmsNorm on these tensors.
    Validate(RmsNormParams{.x = p.x, .weight = p.norm_weight, .out = p.normed,
                           .residual = p.residual, .eps = p.norm_eps});
    PG_OP_NEED(p.normed.data != p.x.data && p.normed.data != p.residual.data, op,
               "normed must not alias x or residual");
  }
}

void Validate(const MoeExpertsParams& p) {
  constexpr std::string_view op = "MoeExperts";
  NeedAct(op, "x", p.x, 2);
  NeedAct(op, "out", p.out, 2);
  NeedF32(op, "topk_weights", p.topk_weights, 2);
  PG_OP_NEED(p.topk_ids.ndim == 2 && p.topk_ids.dtype == DType::kI32 && p.topk_ids.is_contiguous(), op, "topk_ids must be a contiguous 2-D i32 tensor, got {}",
                   p.topk_ids.ShapeString());
  const int64_t n = p.x.dim(0), h = p.x.dim(1);
  PG_OP_NEED(p.out.dim(0) == n && p.out.dim(1) == h, op, "out {} must be [{}, {}]", p.out.ShapeString(), n, h);
  PG_OP_NEED(p.topk_ids.dim(0) == n && p.topk_weights.dim(0) == n &&
           p.topk_weights.dim(1) == p.topk_ids.dim(1), op, "topk_ids {} / topk_weights {} must be [{}, top_k]",
                       p.topk_ids.ShapeString(), p.topk_weights.ShapeString(), n);
  PG_OP_NEED(!p.experts.empty(), op, "no experts");
  PG_OP_NEED(p.out.data != p.x.data || n == 0, op, "out must not alias x");
  NeedL2Hint(op, p.l2_after, p.out.device);
  const int64_t inter = p.experts[0].gate.ndim == 2 ? p.experts[0].gate.dim(0) : -1;
  for (size_t e = 0; e < p.experts.size(); ++e) {
    const MoeExpertWeights& w = p.experts[e];
    NeedWeight(op, fmt::format("expert {} gate", e), w.gate, inter, h);
    NeedWeight(op, fmt::format("expert {} up", e), w.up, inter, h);
    NeedWeight(op, fmt::format("expert {} down", e), w.down, h, inter);
    NeedScale(op, fmt::format("expert {} gate", e), w.gate, w.gate_scale);
    NeedScale(op, fmt::format("expert {} up", e), w.up, w.up_scale);
    NeedScale(op, fmt::format("expert {} down", e), w.down, w.down_scale);
  }
  if (p.shared.gate.data) {
    const MoeExpertWeights& w = p.shared;
    const int64_t si = w.gate.ndim == 2 ? w.gate.dim(0) : -1;
    PG_OP_NEED(si > 0 && si % inter == 0 && w.gate.dtype == p.experts[0].gate.dtype, op,
               "shared expert gate {} must be [k * {}, {}] of the routed experts' dtype",
               w.gate.ShapeString(), inter, h);
    NeedWeight(op, "shared gate", w.gate, si, h);
    NeedWeight(op, "shared up", w.up, si, h);
    NeedWeight(op, "shared down", w.down, h, si);
    NeedScale(op, "shared gate", w.gate, w.gate_scale);
    NeedScale(op, "shared up", w.up, w.up_scale);
    NeedScale(op, "shared down", w.down, w.down_scale);
  }
  if (p.route) {
    const MoeRouterParams& r = *p.route;
    Validate(r);
    const TensorView& in = r.norm_weight.data ? r.normed : r.x;
    PG_OP_NEED(r.topk_ids.data == p.topk_ids.data && r.topk_weights.data == p.topk_weights.data &&
                   r.topk_ids.dim(0) == n && r.topk_ids.dim(1) == p.topk_ids.dim(1) &&
                   r.logits.dim(1) == int64_t(p.experts.size()) &&
                   (!r.x.data || in.data == p.x.data),
               op, "the fused routing must write this op's topk_ids / topk_weights ({} tokens, {} "
               "experts) and, with a router matmul, read this op's x", n, p.experts.size());
    return;  // ids are outputs
  }
  // Ids on the device are not read back here (a sync); the CUDA kernels skip ids outside
  // [0, num_experts) as empty routes.
  if (p.topk_ids.device != Device::kCpu) return;
  const int32_t* ids = p.topk_ids.as<int32_t>();
  const int64_t num_experts = int64_t(p.experts.size());
  for (int64_t i = 0; i < p.topk_ids.numel(); ++i)
    if (ids[i] < -1 || ids[i] >= num_experts)
      Throw(ErrorCode::kInvalidArgument, "{}: expert id {} at {} outside [-1, {})", op, ids[i], i,
            num_experts);
}

// The optional positions of a fused RoPE: [num_tokens] i32, rotary_dim 0 or rope_dim.
void ValidateFusedRope(std::string_view op, const TensorView& positions, const RopeConfig& c,
                       int64_t num_tokens, int64_t rope_dim) {
  if (!positions.data) return;
  PG_OP_NEED(positions.ndim == 1 && positions.dtype == DType::kI32 && positions.is_contiguous() &&
                 positions.dim(0) == num_tokens,
             op, "positions {} must be [{}] i32", positions.ShapeString(), num_tokens);
  PG_OP_NEED(rope_dim > 0 && rope_dim % 2 == 0 && (c.rotary_dim == 0 || c.rotary_dim == rope_dim),
             op, "fused rope: rotary_dim {} must be 0 or the (even) rope dim {}", c.rotary_dim,
             rope_dim);
}

void Validate(const MlaCacheWriteParams& p) {
  constexpr std::string_view op = "MlaCacheWrite";
  NeedAct(op, "latent", p.latent, 2);
  ValidateLatentCache(op, p.cache, p.batch, p.latent.dim(0), p.latent.dim(1), p.latent.data);
  if (p.norm_weight.data || p.positions.data)
    PG_OP_NEED(p.kv_lora_rank > 0 && p.kv_lora_rank <= p.latent.dim(1), op,
               "kv_lora_rank {} must be in (0, {}] with a fused norm / rope", p.kv_lora_rank,
               p.latent.dim(1));
  if (p.norm_weight.data)
    PG_OP_NEED(p.norm_weight.ndim == 1 && p.norm_weight.dim(0) == p.kv_lora_rank &&
                   p.norm_weight.is_contiguous() &&
                   (p.norm_weight.dtype == DType::kF32 || p.norm_weight.dtype == DType::kF16 ||
                    p.norm_weight.dtype == DType::kBF16) && p.eps >= 0.0f,
               op, "norm_weight {} must be [{}] f32/f16/bf16 (eps {} >= 0)",
               p.norm_weight.ShapeString(), p.kv_lora_rank, p.eps);
  ValidateFusedRope(op, p.positions, p.rope, p.latent.dim(0), p.latent.dim(1) - p.kv_lora_rank);
}

void Validate(const MlaAttentionParams& p) {
  constexpr std::string_view op = "MlaAttention";
  NeedAct(op, "q", p.q, 3);
  NeedAct(op, "out", p.out, 3);
  const int64_t n = p.q.dim(0), heads = p.q.dim(1), qk = p.q.dim(2), v = p.out.dim(2);
  PG_OP_NEED(p.kv_lora_rank > 0 && p.rope_dim >= 0 && p.rope_dim < qk, op, "kv_lora_rank {} must be > 0 and rope_dim {} in [0, {})", p.kv_lora_rank,
                   p.rope_dim, qk);
  PG_OP_NEED(p.out.dim(0) == n && p.out.dim(1) == heads && v > 0, op, "out {} must be [{}, {}, v_dim]", p.out.ShapeString(), n, heads);
  const int64_t nope = qk - p.rope_dim;
  PG_OP_NEED(!p.w_kv_b.data != !p.w_k_b.data && !p.w_k_b.data == !p.w_v_b.data, op,
             "needs either w_kv_b or both w_k_b and w_v_b");
  if (p.w_kv_b.data) {
    NeedWeight(op, "w_kv_b", p.w_kv_b, heads * (nope + v), p.kv_lora_rank);
  } else {
    auto need_split = [&](const char* name, const TensorView& w, int64_t rows, int64_t cols) {
      PG_OP_NEED(w.ndim == 3 && w.is_contiguous() && quant::CanDequantize(w.dtype) &&
                     w.dim(0) == heads && w.dim(1) == rows && w.dim(2) == cols,
                 op, "{} must be a contiguous dequantizable [{}, {}, {}], got {}", name, heads,
                 rows, cols, w.ShapeString());
    };
    need_split("w_k_b", p.w_k_b, p.kv_lora_rank, nope);
    need_split("w_v_b", p.w_v_b, v, p.kv_lora_rank);
  }
  PG_OP_NEED(p.scale >= 0.0f, op, "scale {} must be >= 0", p.scale);
  ValidateLatentCache(op, p.cache, p.batch, n, int64_t(p.kv_lora_rank) + p.rope_dim, p.q.data);
  ValidateFusedRope(op, p.positions, p.rope, n, p.rope_dim);
  if (p.write) {
    Validate(*p.write);
    PG_OP_NEED(p.write->batch == p.batch && p.write->cache.k_cache.data == p.cache.k_cache.data &&
                   p.write->latent.dim(0) == n,
               op, "the fused cache write must use the op's batch, cache and {} tokens", n);
  }
}

Device DeviceOf(const MoeRouterParams& p) { return p.logits.device; }
Device DeviceOf(const MoeExpertsParams& p) { return p.out.device; }
Device DeviceOf(const MlaCacheWriteParams& p) { return p.cache.k_cache.device; }
Device DeviceOf(const MlaAttentionParams& p) { return p.out.device; }

std::string_view OpName(const MoeRouterParams&) { return "MoeRouter"; }
std::string_view OpName(const MoeExpertsParams&) { return "MoeExperts"; }
std::string_view OpName(const MlaCacheWriteParams&) { return "MlaCacheWrite"; }
std::string_view OpName(const MlaAttentionParams&) { return "MlaAttention"; }

void MoeRouter(const MoeRouterParams& p) { Registry::Global().Run(p); }
void MoeExperts(const MoeExpertsParams& p) { Registry::Global().Run(p); }
void MlaCacheWrite(const MlaCacheWriteParams& p) { Registry::Global().Run(p); }
void MlaAttention(const MlaAttentionParams& p) { Registry::Global().Run(p); }

void RegisterMoeKernels(Registry& r) {
  r.Register(KernelImpl<MoeRouterParams>{"ref", Device::kCpu, kPriorityRef, {}, &ref::MoeRouter});
  // The interleaved CPU layouts (IsRows4) are the CPU Matmul's own: the reference reads only
  // the source layouts.
  r.Register(KernelImpl<MoeExpertsParams>{
      "ref", Device::kCpu, kPriorityRef,
      [](const MoeExpertsParams& p) {
        for (const MoeExpertWeights& e : p.experts)
          if (IsRows4(e.gate.dtype) || IsRows4(e.up.dtype) || IsRows4(e.down.dtype)) return false;
        return !IsRows4(p.shared.gate.dtype);
      },
      &ref::MoeExperts});
  r.Register(
      KernelImpl<MlaCacheWriteParams>{"ref", Device::kCpu, kPriorityRef, {}, &ref::MlaCacheWrite});
  r.Register(KernelImpl<MlaAttentionParams>{"ref", Device::kCpu, kPriorityRef, {},
                                            &ref::MlaAttention});
  cpu::RegisterMoe(r);
  cpu::RegisterMla(r);
}

}  // namespace pg::ops
