// Registry construction, per-op validation, and the dispatch entry points of ops.h.
#include "kernels/registry.h"
#include "kernels/validate.h"

#include <algorithm>
#include <atomic>
#include <limits>

#include "core/quant.h"
#include "core/status.h"

namespace pg::ops {

namespace {
std::atomic<int> g_max_kernel_priority{std::numeric_limits<int>::max()};
}  // namespace

void SetMaxKernelPriority(int max_priority) { g_max_kernel_priority = max_priority; }
int MaxKernelPriority() { return g_max_kernel_priority.load(std::memory_order_relaxed); }

namespace {

[[noreturn]] void Bad(std::string_view op, const std::string& what) {
  Throw(ErrorCode::kInvalidArgument, "{}: {}", op, what);
}

// All dims but dim 0 are densely packed (innermost stride 1); dim 0 may have any stride
// >= the packed size of one row (so a view of rows of a wider buffer is allowed).
bool RowsPacked(const TensorView& t) {
  if (t.ndim == 0) return true;
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 1; --i) {
    if (t.shape[i] != 1 && t.strides[i] != stride) return false;
    stride *= t.shape[i];
  }
  return t.shape[0] <= 1 || t.strides[0] >= stride;
}


void NeedF32Rows(std::string_view op, const char* name, const TensorView& t, int ndim) {
  PG_OP_NEED(t.data != nullptr || t.numel() == 0, op, "{} is null", name);
  PG_OP_NEED(t.ndim == ndim, op, "{} must be {}-D, got {}", name, ndim, t.ShapeString());
  // Activations: f32 on the CPU, bf16 on CUDA (ops.h).
  PG_OP_NEED(t.dtype == DType::kF32 || (t.dtype == DType::kBF16 && t.device == Device::kCuda), op, "{} must be f32 (bf16 on cuda), got {}", name, t.ShapeString());
  PG_OP_NEED(RowsPacked(t), op, "{} {} must have packed rows", name, t.ShapeString());
}

bool SameShape(const TensorView& a, const TensorView& b) {
  if (a.ndim != b.ndim) return false;
  for (int i = 0; i < a.ndim; ++i)
    if (a.shape[i] != b.shape[i]) return false;
  return true;
}

bool SameDevice(std::initializer_list<const TensorView*> ts) {
  Device d = (*ts.begin())->device;
  for (const TensorView* t : ts)
    if (t->data && t->device != d) return false;
  return true;
}

bool IsCacheDType(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kF8E4M3;
}

// Checks the cache tensors and the batch metadata against `num_tokens` new rows.
void ValidateBatch(std::string_view op, const AttentionBatch* b, const KvCacheView& c,
                   int64_t num_tokens, int64_t num_kv_heads, int64_t head_dim) {
  PG_OP_NEED(b != nullptr, op, "batch is null");
  const TensorView& kc = c.k_cache;
  const TensorView& vc = c.v_cache;
  PG_OP_NEED(kc.ndim == 4 && SameShape(kc, vc) && kc.dtype == vc.dtype && IsCacheDType(kc.dtype) &&
           kc.is_contiguous() && vc.is_contiguous() && kc.data && vc.data, op, "cache must be two contiguous [pages, page_size, kv_heads, head_dim] "
                       "f32/f16/bf16/f8_e4m3 tensors, got k {} v {}", kc.ShapeString(), vc.ShapeString());
  PG_OP_NEED(kc.dim(2) == num_kv_heads && kc.dim(3) == head_dim, op, "cache {} does not match kv_heads {} head_dim {}", kc.ShapeString(),
                   num_kv_heads, head_dim);
  PG_OP_NEED(b->page_size > 0 && b->page_size == kc.dim(1), op, "batch page_size {} != cache page size in {}", b->page_size, kc.ShapeString());
  size_t ns = size_t(b->num_seqs);
  PG_OP_NEED(b->num_seqs >= 0 && b->q_start.size() == ns && b->q_len.size() == ns &&
           b->kv_len.size() == ns && b->page_start.size() == ns, op, "batch spans must all have num_seqs = {} entries", b->num_seqs);
  int64_t total = 0;
  const int64_t num_pages = kc.dim(0);
  for (size_t s = 0; s < ns; ++s) {
    int64_t qs = b->q_start[s], ql = b->q_len[s], kl = b->kv_len[s], ps = b->page_start[s];
    // Per-sequence and per-page checks format their message only on failure (this runs for
    // every layer of every step: formatting eagerly cost ~0.2 µs per page).
    if (!(ql >= 0 && kl >= ql && qs >= 0 && qs + ql <= num_tokens))
      Bad(op, fmt::format("seq {}: q_start {} q_len {} kv_len {} invalid for {} tokens", s, qs, ql,
                          kl, num_tokens));
    int64_t pages = (kl + b->page_size - 1) / b->page_size;
    if (!(ps >= 0 && ps + pages <= int64_t(b->page_table.size())))
      Bad(op, fmt::format("seq {}: pages [{}, {}) outside page_table of {}", s, ps, ps + pages,
                          b->page_table.size()));
    for (int64_t i = 0; i < pages; ++i) {
      int64_t page = b->page_table[size_t(ps + i)];
      if (page < 0 || page >= num_pages)
        Bad(op, fmt::format("seq {}: page {} out of range [0, {})", s, page, num_pages));
    }
    total += ql;
  }
  PG_OP_NEED(total == num_tokens, op, "batch has {} query tokens, tensors have {}", total, num_tokens);
}

}  // namespace

int AttentionBatch::num_tokens() const {
  int n = 0;
  for (int32_t l : q_len) n += l;
  return n;
}

void ThrowNoKernel(std::string_view op, Device device) {
  Throw(ErrorCode::kUnsupported, "{}: no implementation for these params on {}", op,
        device == Device::kCpu ? "cpu" : "cuda");
}
void ThrowNotCapable(std::string_view op, std::string_view backend) {
  Throw(ErrorCode::kInvalidArgument, "{}: backend '{}' cannot run these params", op, backend);
}

// ---- validation -----------------------------------------------------------------------

void Validate(const EmbeddingParams& p) {
  constexpr std::string_view op = "Embedding";
  PG_OP_NEED(p.table.ndim == 2 && p.table.data && quant::CanDequantize(p.table.dtype) &&
           p.table.strides[1] == 1, op, "table must be a 2-D dequantizable matrix, got {}", p.table.ShapeString());
  PG_OP_NEED(p.ids.ndim == 1 && p.ids.dtype == DType::kI32 && p.ids.is_contiguous(), op, "ids must be 1-D i32, got {}", p.ids.ShapeString());
  NeedF32Rows(op, "out", p.out, 2);
  PG_OP_NEED(p.out.dim(0) == p.ids.dim(0) && p.out.dim(1) == p.table.dim(1), op, "out {} must be [{}, {}]", p.out.ShapeString(), p.ids.dim(0), p.table.dim(1));
  PG_OP_NEED(SameDevice({&p.table, &p.ids, &p.out}), op, "tensors on different devices");
}

void Validate(const RmsNormParams& p) {
  constexpr std::string_view op = "RmsNorm";
  NeedF32Rows(op, "x", p.x, 2);
  NeedF32Rows(op, "out", p.out, 2);
  PG_OP_NEED(SameShape(p.x, p.out), op, "x {} and out {} differ", p.x.ShapeString(), p.out.ShapeString());
  PG_OP_NEED(p.weight.ndim == 1 && p.weight.dim(0) == p.x.dim(1) && p.weight.is_contiguous() &&
           (p.weight.dtype == DType::kF32 || p.weight.dtype == DType::kF16 ||
            p.weight.dtype == DType::kBF16), op, "weight {} must be [{}] f32/f16/bf16", p.weight.ShapeString(), p.x.dim(1));
  if (p.residual.data) {
    NeedF32Rows(op, "residual", p.residual, 2);
    PG_OP_NEED(SameShape(p.x, p.residual), op, "residual {} must match x {}", p.residual.ShapeString(), p.x.ShapeString());
  }
  PG_OP_NEED(p.eps >= 0.0f, op, "eps {} < 0", p.eps);
  PG_OP_NEED(SameDevice({&p.x, &p.out, &p.weight, &p.residual}), op, "tensors on different devices");
}

void Validate(const RopeParams& p) {
  constexpr std::string_view op = "Rope";
  NeedF32Rows(op, "x", p.x, 3);
  PG_OP_NEED(p.positions.ndim == 1 && p.positions.dtype == DType::kI32 &&
           p.positions.is_contiguous() && p.positions.dim(0) == p.x.dim(0), op, "positions {} must be [{}] i32", p.positions.ShapeString(), p.x.dim(0));
  const RopeConfig& c = p.config;
  int64_t head_dim = p.x.dim(2);
  int64_t rd = c.rotary_dim == 0 ? head_dim : c.rotary_dim;
  PG_OP_NEED(rd > 0 && rd <= head_dim && rd % 2 == 0, op, "rotary_dim {} must be even and in (0, head_dim {}]", rd, head_dim);
  PG_OP_NEED(c.theta > 0.0f, op, "theta {} must be > 0", c.theta);
  PG_OP_NEED(c.scaling == RopeScaling::kNone || c.factor > 0.0f, op, "scaling factor {} must be > 0", c.factor);
  PG_OP_NEED(c.scaling != RopeScaling::kLlama3 || c.high_freq_factor != c.low_freq_factor, op, "llama3 rope: high_freq_factor must differ from low_freq_factor");
  PG_OP_NEED(c.scaling == RopeScaling::kNone || c.scaling == RopeScaling::kLinear ||
           c.original_max_position > 0, op, "original_max_position {} must be > 0", c.original_max_position);
  PG_OP_NEED(SameDevice({&p.x, &p.positions}), op, "tensors on different devices");
}

void Validate(const MatmulParams& p) {
  constexpr std::string_view op = "Matmul";
  NeedF32Rows(op, "x", p.x, 2);
  NeedF32Rows(op, "out", p.out, 2);
  PG_OP_NEED(p.w.ndim == 2 && p.w.data && p.w.strides[1] == 1 && (quant::CanDequantize(p.w.dtype) || IsRows4(p.w.dtype)), op, "w must be a 2-D row-major dequantizable matrix, got {}", p.w.ShapeString());
  PG_OP_NEED(!IsRows4(p.w.dtype) || (p.w.is_contiguous() && p.w.dim(0) % 4 == 0 && p.w.device == Device::kCpu), op, "w {} {}: an interleaved layout must be a whole contiguous host matrix", p.w.ShapeString(), Name(p.w.dtype));
  PG_OP_NEED(p.w.dim(1) == p.x.dim(1), op, "x {} and w {} disagree on k", p.x.ShapeString(), p.w.ShapeString());
  PG_OP_NEED(p.out.dim(0) == p.x.dim(0) && p.out.dim(1) == p.w.dim(0), op, "out {} must be [{}, {}] for x {} w {}", p.out.ShapeString(), p.x.dim(0),
                   p.w.dim(0), p.x.ShapeString(), p.w.ShapeString());
  if (p.bias.data)
    PG_OP_NEED(p.bias.ndim == 1 && p.bias.dtype == DType::kF32 && p.bias.dim(0) == p.w.dim(0) &&
             p.bias.is_contiguous(), op, "bias {} must be [{}] f32", p.bias.ShapeString(), p.w.dim(0));
  PG_OP_NEED(p.out.data != p.x.data || p.x.numel() == 0, op, "out must not alias x");
  if (p.w.dtype == DType::kF8E4M3) {  // w_scale: [1], [m] or [ceil(m/128), ceil(k/128)] f32
    const TensorView& s = p.w_scale;
    const int64_t m = p.w.dim(0), k = p.w.dim(1);
    const bool shape_ok = (s.ndim == 1 && (s.dim(0) == 1 || s.dim(0) == m)) ||
                          (s.ndim == 2 && s.dim(0) == (m + 127) / 128 && s.dim(1) == (k + 127) / 128);
    PG_OP_NEED(s.data && s.dtype == DType::kF32 && s.is_contiguous() && shape_ok, op,
               "fp8 w {} needs w_scale f32 [1], [{}] or [{}, {}], got {}", p.w.ShapeString(), m,
               (m + 127) / 128, (k + 127) / 128, s.ShapeString());
  } else {
    PG_OP_NEED(!p.w_scale.data, op, "w_scale is for fp8 e4m3 weights only, w is {}", p.w.ShapeString());
  }
  PG_OP_NEED(SameDevice({&p.x, &p.w, &p.out, &p.bias, &p.w_scale}), op, "tensors on different devices");
}

void Validate(const SwiGluParams& p) {
  constexpr std::string_view op = "SwiGlu";
  NeedF32Rows(op, "gate", p.gate, 2);
  NeedF32Rows(op, "out", p.out, 2);
  if (p.up.data) {
    NeedF32Rows(op, "up", p.up, 2);
    PG_OP_NEED(SameShape(p.gate, p.up) && SameShape(p.gate, p.out), op, "gate {}, up {}, out {} must have one shape", p.gate.ShapeString(),
                     p.up.ShapeString(), p.out.ShapeString());
  } else {
    PG_OP_NEED(p.gate.dim(0) == p.out.dim(0) && p.gate.dim(1) == 2 * p.out.dim(1), op, "gate {} must be [rows, 2 * inter] for out {}", p.gate.ShapeString(),
                     p.out.ShapeString());
  }
  PG_OP_NEED(SameDevice({&p.gate, &p.up, &p.out}), op, "tensors on different devices");
}

void Validate(const AddParams& p) {
  constexpr std::string_view op = "Add";
  for (const TensorView* t : {&p.a, &p.b, &p.out})
    PG_OP_NEED((t->dtype == DType::kF32 || (t->dtype == DType::kBF16 && t->device == Device::kCuda)) &&
             t->is_contiguous() && (t->data || t->numel() == 0), op, "operands must be contiguous f32 (bf16 on cuda), got {}", t->ShapeString());
  PG_OP_NEED(SameShape(p.a, p.b) && SameShape(p.a, p.out), op, "a {}, b {}, out {} must have one shape", p.a.ShapeString(),
                   p.b.ShapeString(), p.out.ShapeString());
  PG_OP_NEED(SameDevice({&p.a, &p.b, &p.out}), op, "tensors on different devices");
}

void Validate(const KvWriteParams& p) {
  constexpr std::string_view op = "KvWrite";
  NeedF32Rows(op, "k", p.k, 3);
  NeedF32Rows(op, "v", p.v, 3);
  PG_OP_NEED(SameShape(p.k, p.v), op, "k {} and v {} differ", p.k.ShapeString(), p.v.ShapeString());
  ValidateBatch(op, p.batch, p.cache, p.k.dim(0), p.k.dim(1), p.k.dim(2));
  PG_OP_NEED(SameDevice({&p.k, &p.v, &p.cache.k_cache, &p.cache.v_cache}), op, "tensors on different devices");
}

void Validate(const AttentionParams& p) {
  constexpr std::string_view op = "Attention";
  NeedF32Rows(op, "q", p.q, 3);
  NeedF32Rows(op, "out", p.out, 3);
  PG_OP_NEED(SameShape(p.q, p.out), op, "q {} and out {} differ", p.q.ShapeString(), p.out.ShapeString());
  PG_OP_NEED(p.cache.k_cache.ndim == 4, op, "k_cache {} must be 4-D", p.cache.k_cache.ShapeString());
  int64_t num_kv_heads = p.cache.k_cache.dim(2);
  PG_OP_NEED(num_kv_heads > 0 && p.q.dim(1) % num_kv_heads == 0, op, "num_heads {} must be a multiple of num_kv_heads {}", p.q.dim(1), num_kv_heads);
  ValidateBatch(op, p.batch, p.cache, p.q.dim(0), num_kv_heads, p.q.dim(2));
  PG_OP_NEED(p.sliding_window >= 0 && p.logit_softcap >= 0.0f && p.scale >= 0.0f, op, "sliding_window {}, logit_softcap {}, scale {} must be >= 0", p.sliding_window,
                   p.logit_softcap, p.scale);
  PG_OP_NEED(SameDevice({&p.q, &p.out, &p.cache.k_cache, &p.cache.v_cache}), op, "tensors on different devices");
}

void Validate(const RopeKvWriteParams& p) {
  constexpr std::string_view op = "RopeKvWrite";
  NeedF32Rows(op, "q", p.q, 3);
  PG_OP_NEED(p.q.dim(0) == p.k.dim(0) && p.q.dim(2) == p.k.dim(2), op,
             "q {} and k {} disagree on tokens or head_dim", p.q.ShapeString(), p.k.ShapeString());
  Validate(RopeParams{p.q, p.positions, p.config});
  Validate(KvWriteParams{p.k, p.v, p.cache, p.batch});
  PG_OP_NEED(SameDevice({&p.q, &p.k, &p.positions, &p.cache.k_cache}), op, "tensors on different devices");
  PG_OP_NEED(!p.q_norm.data == !p.k_norm.data, op, "q_norm and k_norm come together");
  for (const TensorView* w : {&p.q_norm, &p.k_norm})
    if (w->data)
      PG_OP_NEED(w->ndim == 1 && w->dim(0) == p.q.dim(2) && w->is_contiguous() &&
                     (w->dtype == DType::kF32 || w->dtype == DType::kF16 || w->dtype == DType::kBF16) &&
                     w->device == p.q.device && p.q.strides[1] == p.q.dim(2) &&
                     p.k.strides[1] == p.k.dim(2),
                 op, "norm weight {} must be [head_dim {}] f32/f16/bf16 beside packed q/k heads",
                 w->ShapeString(), p.q.dim(2));
}

Device DeviceOf(const EmbeddingParams& p) { return p.out.device; }
Device DeviceOf(const RmsNormParams& p) { return p.out.device; }
Device DeviceOf(const RopeParams& p) { return p.x.device; }
Device DeviceOf(const MatmulParams& p) { return p.out.device; }
Device DeviceOf(const SwiGluParams& p) { return p.out.device; }
Device DeviceOf(const AddParams& p) { return p.out.device; }
Device DeviceOf(const KvWriteParams& p) { return p.cache.k_cache.device; }
Device DeviceOf(const AttentionParams& p) { return p.out.device; }
Device DeviceOf(const RopeKvWriteParams& p) { return p.cache.k_cache.device; }

std::string_view OpName(const EmbeddingParams&) { return "Embedding"; }
std::string_view OpName(const RmsNormParams&) { return "RmsNorm"; }
std::string_view OpName(const RopeParams&) { return "Rope"; }
std::string_view OpName(const MatmulParams&) { return "Matmul"; }
std::string_view OpName(const SwiGluParams&) { return "SwiGlu"; }
std::string_view OpName(const AddParams&) { return "Add"; }
std::string_view OpName(const KvWriteParams&) { return "KvWrite"; }
std::string_view OpName(const AttentionParams&) { return "Attention"; }
std::string_view OpName(const RopeKvWriteParams&) { return "RopeKvWrite"; }

OpObserver*& CurrentOpObserver() {
  thread_local OpObserver* observer = nullptr;
  return observer;
}

const Registry& Registry::Global() {
  static const Registry registry = [] {
    Registry r;
    RegisterRefKernels(r);
    RegisterCpuKernels(r);
    RegisterMoeKernels(r);
    RegisterSampleKernels(r);
    RegisterFusedKernels(r);
    RegisterFusedAttentionKernels(r);
#if defined(PEREGRINE_HAVE_CUDA)
    RegisterCudaKernels(r);
    RegisterCudaMlaKernels(r);
    RegisterCudaMoeKernels(r);
    RegisterCudaSampleKernels(r);
    RegisterCudaFp8MatmulKernels(r);
    RegisterCudaFusedKernels(r);
    RegisterCudaFusedAttentionKernels(r);
#endif
    return r;
  }();
  return registry;
}

// ---- ops.h entry points ------------------------------------------------------------------
void Embedding(const EmbeddingParams& p) { Registry::Global().Run(p); }
void RmsNorm(const RmsNormParams& p) { Registry::Global().Run(p); }
void Rope(const RopeParams& p) { Registry::Global().Run(p); }
void Matmul(const MatmulParams& p) { Registry::Global().Run(p); }
void SwiGlu(const SwiGluParams& p) { Registry::Global().Run(p); }
void Add(const AddParams& p) { Registry::Global().Run(p); }
void KvWrite(const KvWriteParams& p) { Registry::Global().Run(p); }
void Attention(const AttentionParams& p) { Registry::Global().Run(p); }
void RopeKvWrite(const RopeKvWriteParams& p) { Registry::Global().Run(p); }

}  // namespace pg::ops
