#include "models/moe_weights.h"

#include <map>
#include <random>
#include <regex>

#include "core/quant.h"
#include "core/status.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "models/weights.h"

namespace pg::models {
namespace {

std::string ShapeOf(std::initializer_list<int64_t> shape) {
  std::string s = "[";
  for (int64_t d : shape) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
  return s + "]";
}

bool SameShape(const TensorView& t, std::initializer_list<int64_t> shape) {
  if (t.ndim != int(shape.size())) return false;
  int i = 0;
  for (int64_t d : shape)
    if (t.shape[size_t(i++)] != d) return false;
  return true;
}

// Stable per-name seed so a dummy tensor does not depend on the order of Get calls.
uint64_t NameSeed(uint64_t seed, std::string_view name) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (char c : name) h = (h ^ uint8_t(c)) * 1099511628211ull;
  return h;
}

}  // namespace

MoeWeights::~MoeWeights() = default;

Tensor DequantizeFp8BlockScaled(const TensorView& w, const TensorView& s, int br, int bc,
                                const std::string& name) {
  PG_ENSURE(w.ndim == 2 && w.dtype == DType::kF8E4M3, kMalformed,
            "{}: fp8 block-scaled weight must be 2-D f8_e4m3, got {}", name, w.ShapeString());
  const int64_t out = w.dim(0), in = w.dim(1);
  const int64_t so = (out + br - 1) / br, si = (in + bc - 1) / bc;
  PG_ENSURE(s.ndim == 2 && s.dim(0) == so && s.dim(1) == si &&
                (s.dtype == DType::kF32 || s.dtype == DType::kBF16 || s.dtype == DType::kF16),
            kMalformed, "{}_scale_inv must be [{}, {}] f32 for {}x{} blocks of {}, got {}", name,
            so, si, br, bc, w.ShapeString(), s.ShapeString());
  std::vector<float> scale(static_cast<size_t>(so * si));
  quant::DequantizeRow(s.dtype, s.data, scale.data(), so * si);
  Tensor t(DType::kF32, {out, in});
  const uint8_t* src = static_cast<const uint8_t*>(w.data);
  float* dst = t.data<float>();
  for (int64_t r = 0; r < out; ++r) {
    const float* srow = scale.data() + (r / br) * si;
    for (int64_t c = 0; c < in; ++c)
      dst[r * in + c] = F8E4M3ToF32(src[r * in + c]) * srow[c / bc];
  }
  return t;
}

std::unique_ptr<MoeWeights> MoeWeights::FromSafetensors(std::unique_ptr<io::SafetensorsModel> m,
                                                        int block_rows, int block_cols) {
  std::unique_ptr<MoeWeights> w(new MoeWeights());
  w->source_ = "safetensors checkpoint";
  w->block_rows_ = block_rows;
  w->block_cols_ = block_cols;
  for (const auto& name : m->TensorNames()) w->total_bytes_ += int64_t(m->GetTensor(name).nbytes());
  w->st_ = std::move(m);
  return w;
}

// DeepSeek's kv_b_proj [heads * (nope + v), rank] from llama.cpp's split form: per head h,
// rows [h * (nope + v), + nope) are k_b[h]ᵀ and the next v rows are v_b[h].
//   k_b: [heads, rank, nope] (ggml ne {nope, rank, heads}: the converter transposes W_UK),
//   v_b: [heads, v, rank]    (ggml ne {rank, v, heads}).
// Float types stay as stored (an exact copy) when both agree, anything else becomes f32.
namespace {
Tensor JoinKvB(const TensorView& k_b, const TensorView& v_b, const std::string& where) {
  PG_ENSURE(k_b.ndim == 3 && v_b.ndim == 3 && k_b.dim(0) == v_b.dim(0) && k_b.dim(1) == v_b.dim(2),
            kMalformed,
            "{}: attn_k_b {} and attn_v_b {} must be [heads, kv_lora_rank, nope] and "
            "[heads, v_dim, kv_lora_rank] with the same heads and rank",
            where, k_b.ShapeString(), v_b.ShapeString());
  for (const TensorView* t : {&k_b, &v_b})
    PG_ENSURE(quant::CanDequantize(t->dtype), kUnsupported, "{}: attn_k_b / attn_v_b dtype {}",
              where, Name(t->dtype));
  const int64_t heads = k_b.dim(0), rank = k_b.dim(1), nope = k_b.dim(2), vd = v_b.dim(1);
  auto f32 = [](const TensorView& t) {
    std::vector<float> v(size_t(t.numel()));
    quant::DequantizeRow(t.dtype, t.data, v.data(), t.numel());
    return v;
  };
  const std::vector<float> k = f32(k_b), v = f32(v_b);
  const bool keep =
      k_b.dtype == v_b.dtype &&
      (k_b.dtype == DType::kF32 || k_b.dtype == DType::kF16 || k_b.dtype == DType::kBF16);
  Tensor out(keep ? k_b.dtype : DType::kF32, {heads * (nope + vd), rank});
  std::vector<float> row(static_cast<size_t>(rank));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < nope + vd; ++j) {
      for (int64_t r = 0; r < rank; ++r)
        row[size_t(r)] = j < nope ? k[size_t((h * rank + r) * nope + j)]
                                  : v[size_t((h * vd + j - nope) * rank + r)];
      quant::QuantizeRow(out.dtype(), row.data(), out.view().row_ptr(h * (nope + vd) + j), rank);
    }
  }
  return out;
}
}  // namespace

std::unique_ptr<MoeWeights> MoeWeights::FromGguf(std::unique_ptr<io::GgufFile> file) {
  std::unique_ptr<MoeWeights> w(new MoeWeights());
  w->source_ = file->path();
  static const std::regex kExperts(R"(blk\.(\d+)\.ffn_(gate|up|down)_exps\.weight)");
  static const std::regex kSplitKvB(R"(blk\.(\d+)\.attn_([kv])_b\.weight)");
  static const std::regex kScoreBias(R"(blk\.(\d+)\.exp_probs_b\.bias)");
  std::map<std::string, std::pair<TensorView, TensorView>> split_kv_b;  // layer -> (k_b, v_b)
  for (const io::GgufTensorInfo& t : file->tensors()) {
    const TensorView v = t.view();
    w->total_bytes_ += int64_t(t.nbytes);
    std::smatch m;
    if (std::regex_match(t.name, m, kSplitKvB)) {
      auto& kv = split_kv_b[m[1].str()];
      (m[2] == "k" ? kv.first : kv.second) = v;
      continue;
    }
    if (std::regex_match(t.name, m, kScoreBias)) {
      w->gguf_views_.emplace("model.layers." + m[1].str() + ".mlp.gate.e_score_correction_bias", v);
      continue;
    }
    if (!std::regex_match(t.name, m, kExperts)) {
      w->gguf_views_.emplace(HfNameFromCanonical(t.name), v);
      continue;
    }
    PG_ENSURE(v.ndim == 3, kMalformed, "{}: tensor '{}' has shape {}, expected [experts, out, in]",
              w->source_, t.name, v.ShapeString());
    for (int64_t e = 0; e < v.dim(0); ++e)
      w->gguf_views_.emplace("model.layers." + m[1].str() + ".mlp.experts." + std::to_string(e) +
                                 "." + m[2].str() + "_proj.weight",
                             v.Slice0(e, 1).Reshape({v.dim(1), v.dim(2)}));
  }
  for (const auto& [layer, kv] : split_kv_b) {
    const std::string p = "blk." + layer + ".";
    PG_ENSURE(kv.first.data && kv.second.data, kMalformed, "{}: '{}attn_{}_b.weight' without '{}'",
              w->source_, p, kv.first.data ? 'k' : 'v',
              p + (kv.first.data ? "attn_v_b.weight" : "attn_k_b.weight"));
    const std::string hf = "model.layers." + layer + ".self_attn.kv_b_proj.weight";
    PG_ENSURE(!w->gguf_views_.count(hf), kMalformed,
              "{}: layer {} has both attn_kv_b and attn_k_b / attn_v_b", w->source_, layer);
    const std::string where = w->source_ + ": blk." + layer;
    w->gguf_views_.emplace(hf, w->Own(JoinKvB(kv.first, kv.second, where)));
    w->split_kv_b_.emplace(hf, SplitKvB{kv.first, kv.second});
  }
  w->gguf_ = std::move(file);
  return w;
}

std::string MoeWeights::FileName(const std::string& name) const {
  if (!gguf_) return name;
  static const std::regex kExpert(R"(model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight)");
  static const std::regex kScoreBias(R"(model\.layers\.(\d+)\.mlp\.gate\.e_score_correction_bias)");
  std::smatch m;
  if (std::regex_match(name, m, kExpert))
    return "blk." + m[1].str() + ".ffn_" + m[3].str() + "_exps.weight[" + m[2].str() + "]";
  if (std::regex_match(name, m, kScoreBias)) return "blk." + m[1].str() + ".exp_probs_b.bias";
  const std::string g = CanonicalNameFromHf(name);
  if (split_kv_b_.count(name)) {  // "blk.N.attn_kv_b.weight" -> the two tensors it came from
    const std::string p = g.substr(0, g.size() - std::string("kv_b.weight").size());
    return p + "k_b.weight + " + p + "v_b.weight";
  }
  return g;
}

std::optional<TensorView> MoeWeights::FindStored(const std::string& name) const {
  if (st_) {
    if (const io::SafetensorsTensorInfo* info = st_->FindTensor(name)) return info->view();
  } else if (auto it = gguf_views_.find(name); it != gguf_views_.end()) {
    return it->second;
  }
  return std::nullopt;
}

std::unique_ptr<MoeWeights> MoeWeights::Dummy(DType dtype, uint64_t seed) {
  PG_ENSURE(quant::CanDequantize(dtype), kUnsupported, "dummy weights: dtype {} not supported",
            Name(dtype));
  std::unique_ptr<MoeWeights> w(new MoeWeights());
  w->source_ = "dummy weights";
  w->dummy_ = true;
  w->dummy_dtype_ = dtype;
  w->seed_ = seed;
  return w;
}

std::optional<MoeWeights::SplitKvB> MoeWeights::GetSplitKvB(std::string_view kv_b_name) const {
  const auto it = split_kv_b_.find(kv_b_name);
  if (it == split_kv_b_.end()) return std::nullopt;
  return it->second;
}

bool MoeWeights::Has(std::string_view name) const {
  return dummy_ || cache_.count(name) || FindStored(std::string(name)).has_value();
}

TensorView MoeWeights::Own(Tensor t) {
  TensorView v = t.view();
  owned_.push_back(std::move(t));
  return v;
}

TensorView MoeWeights::DummyTensor(std::initializer_list<int64_t> shape, DType dt, float mean,
                                   uint64_t seed) {
  Tensor t(dt, shape);
  const int64_t cols = t.view().dim(-1), rows = t.numel() / cols;
  std::vector<float> row(static_cast<size_t>(cols));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& x : row) x = mean + dist(rng);
    quant::QuantizeRow(dt, row.data(), t.view().row_ptr(r), cols);
  }
  total_bytes_ += t.nbytes();
  return Own(std::move(t));
}

TensorView MoeWeights::Get(const std::string& name, std::initializer_list<int64_t> shape) {
  if (auto it = cache_.find(name); it != cache_.end()) return it->second;
  TensorView v;
  if (dummy_) {
    v = DummyTensor(shape, dummy_dtype_, 0.0f, NameSeed(seed_, name));
  } else {
    const std::optional<TensorView> stored = FindStored(name);
    PG_ENSURE(stored.has_value(), kMalformed, "{}: missing tensor '{}'", source_, FileName(name));
    v = *stored;
    if (v.dtype == DType::kF8E4M3) {
      const std::optional<TensorView> s = FindStored(name + "_scale_inv");
      PG_ENSURE(s.has_value(), kMalformed,
                "{}: fp8 tensor '{}' has no '{}_scale_inv' (only block-scaled fp8 is supported)",
                source_, name, name);
      v = Own(DequantizeFp8BlockScaled(v, *s, block_rows_, block_cols_, name));
    }
  }
  PG_ENSURE(SameShape(v, shape), kMalformed, "{}: tensor '{}' has shape {}, expected {}", source_,
            FileName(name), v.ShapeString(), ShapeOf(shape));
  PG_ENSURE(quant::CanDequantize(v.dtype), kUnsupported, "{}: tensor '{}' has dtype {}", source_,
            FileName(name), Name(v.dtype));
  cache_.emplace(name, v);
  return v;
}

bool MoeWeights::IsStoredFp8(std::string_view name) const {
  const std::optional<TensorView> v = FindStored(std::string(name));
  return v.has_value() && v->dtype == DType::kF8E4M3;
}

MoeWeights::Stored MoeWeights::GetStored(const std::string& name,
                                         std::initializer_list<int64_t> shape) {
  if (!dummy_) {
    const std::optional<TensorView> w = FindStored(name);
    PG_ENSURE(w.has_value(), kMalformed, "{}: missing tensor '{}'", source_, name);
    if (w->dtype == DType::kF8E4M3) {
      const std::optional<TensorView> s = FindStored(name + "_scale_inv");
      PG_ENSURE(s.has_value(), kMalformed,
                "{}: fp8 tensor '{}' has no '{}_scale_inv' (only block-scaled fp8 is supported)",
                source_, name, name);
      PG_ENSURE(SameShape(*w, shape), kMalformed, "{}: tensor '{}' has shape {}, expected {}",
                source_, name, w->ShapeString(), ShapeOf(shape));
      return {*w, *s};
    }
  }
  return {Get(name, shape), TensorView{}};
}

TensorView MoeWeights::GetF32(const std::string& name, std::initializer_list<int64_t> shape,
                              float dummy_value) {
  if (auto it = cache_.find(name); it != cache_.end()) return it->second;
  TensorView v;
  if (dummy_) {
    Tensor t(DType::kF32, shape);
    std::mt19937_64 rng(NameSeed(seed_, name));
    std::normal_distribution<float> dist(0.0f, 0.02f);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data<float>()[i] = dummy_value == 0.0f ? 0.0f : dummy_value + dist(rng);
    total_bytes_ += t.nbytes();
    v = Own(std::move(t));
  } else {
    TensorView src = Get(name, shape);
    if (src.dtype == DType::kF32) {
      v = src;
    } else {
      Tensor t(DType::kF32, src.shape.data(), src.ndim);
      quant::DequantizeRow(src.dtype, src.data, t.data<float>(), src.numel());
      v = Own(std::move(t));
    }
  }
  PG_ENSURE(SameShape(v, shape), kMalformed, "{}: tensor '{}' has shape {}, expected {}", source_,
            name, v.ShapeString(), ShapeOf(shape));
  cache_[name] = v;
  return v;
}

}  // namespace pg::models
