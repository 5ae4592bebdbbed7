#include "models/weights.h"

#include <cstring>
#include <random>
#include <regex>

#include "core/quant.h"
#include "core/status.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "models/config.h"

namespace pg::models {

WeightStore::~WeightStore() = default;

namespace {

// HF <-> GGUF (llama.cpp) tensor names. Top-level names map whole; layer names map their
// middle part: "model.layers.<i>.<hf>.<weight|bias>" <-> "blk.<i>.<gguf>.<weight|bias>".
constexpr std::pair<const char*, const char*> kTopNames[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};
constexpr std::pair<const char*, const char*> kLayerNames[] = {
    {"input_layernorm", "attn_norm"},     {"self_attn.q_proj", "attn_q"},
    {"self_attn.k_proj", "attn_k"},       {"self_attn.v_proj", "attn_v"},
    {"self_attn.o_proj", "attn_output"},  {"self_attn.q_norm", "attn_q_norm"},
    {"self_attn.k_norm", "attn_k_norm"},  {"post_attention_layernorm", "ffn_norm"},
    {"mlp.gate_proj", "ffn_gate"},        {"mlp.up_proj", "ffn_up"},
    {"mlp.down_proj", "ffn_down"},        {"mlp.gate", "ffn_gate_inp"},
    // DeepSeek-V2/V3 (llama.cpp "deepseek2"): MLA projections and the shared experts. The
    // split attn_k_b / attn_v_b form of kv_b and exp_probs_b (the router's correction bias)
    // are not one-to-one renames: MoeWeights::FromGguf maps them.
    {"self_attn.q_a_proj", "attn_q_a"},   {"self_attn.q_a_layernorm", "attn_q_a_norm"},
    {"self_attn.q_b_proj", "attn_q_b"},   {"self_attn.kv_a_proj_with_mqa", "attn_kv_a_mqa"},
    {"self_attn.kv_a_layernorm", "attn_kv_a_norm"}, {"self_attn.kv_b_proj", "attn_kv_b"},
    {"mlp.shared_experts.gate_proj", "ffn_gate_shexp"},
    {"mlp.shared_experts.up_proj", "ffn_up_shexp"},
    {"mlp.shared_experts.down_proj", "ffn_down_shexp"},
};

// `from_hf`: HF -> GGUF, else GGUF -> HF.
std::string MapName(std::string_view name, bool from_hf) {
  for (const auto& [hf, gguf] : kTopNames)
    if (name == (from_hf ? hf : gguf)) return from_hf ? gguf : hf;
  static const std::regex kHfLayer(R"(model\.layers\.(\d+)\.(.+)\.(weight|bias))");
  static const std::regex kGgufLayer(R"(blk\.(\d+)\.(.+)\.(weight|bias))");
  std::string s(name);
  std::smatch m;
  if (std::regex_match(s, m, from_hf ? kHfLayer : kGgufLayer)) {
    for (const auto& [hf, gguf] : kLayerNames)
      if (m[2] == (from_hf ? hf : gguf))
        return (from_hf ? "blk." : "model.layers.") + m[1].str() + "." + (from_hf ? gguf : hf) +
               "." + m[3].str();
  }
  return s;
}

}  // namespace

std::string CanonicalNameFromHf(std::string_view hf) { return MapName(hf, true); }
std::string HfNameFromCanonical(std::string_view gguf) { return MapName(gguf, false); }

void WeightStore::Add(std::string name, TensorView view) {
  auto [it, inserted] = tensors_.emplace(std::move(name), view);
  PG_ENSURE(inserted, kMalformed, "{}: tensor '{}' appears twice", source_, it->first);
}

std::unique_ptr<WeightStore> WeightStore::FromGguf(std::unique_ptr<io::GgufFile> file) {
  std::unique_ptr<WeightStore> w(new WeightStore());
  w->source_ = file->path();
  for (const auto& t : file->tensors()) w->Add(t.name, t.view());
  w->gguf_ = std::move(file);
  return w;
}

std::unique_ptr<WeightStore> WeightStore::FromSafetensors(std::unique_ptr<io::SafetensorsModel> m) {
  std::unique_ptr<WeightStore> w(new WeightStore());
  w->source_ = "safetensors checkpoint";
  for (const auto& name : m->TensorNames())
    w->Add(CanonicalNameFromHf(name), m->GetTensor(name).view());
  w->safetensors_ = std::move(m);
  return w;
}

std::unique_ptr<WeightStore> WeightStore::Dummy(const ModelConfig& c, DType dtype, uint64_t seed) {
  std::unique_ptr<WeightStore> w(new WeightStore());
  w->source_ = "dummy weights";
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<float> row;
  auto make = [&](const std::string& name, std::initializer_list<int64_t> shape, DType dt,
                  float base) {
    Tensor t(dt, shape);
    int64_t cols = t.view().dim(-1);
    int64_t rows = t.numel() / cols;
    row.resize(size_t(cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& x : row) x = base + dist(rng);
      quant::QuantizeRow(dt, row.data(), t.view().row_ptr(r), cols);
    }
    w->Add(name, t.view());
    w->owned_.push_back(std::move(t));
  };
  const int64_t h = c.hidden_size, q = int64_t(c.num_heads) * c.head_dim,
                kv = int64_t(c.num_kv_heads) * c.head_dim, f = c.intermediate_size;
  make("token_embd.weight", {c.vocab_size, h}, dtype, 0.0f);
  make("output_norm.weight", {h}, DType::kF32, 1.0f);
  if (!c.tie_word_embeddings) make("output.weight", {c.vocab_size, h}, dtype, 0.0f);
  for (int i = 0; i < c.num_layers; ++i) {
    std::string p = "blk." + std::to_string(i) + ".";
    make(p + "attn_norm.weight", {h}, DType::kF32, 1.0f);
    make(p + "ffn_norm.weight", {h}, DType::kF32, 1.0f);
    make(p + "attn_q.weight", {q, h}, dtype, 0.0f);
    make(p + "attn_k.weight", {kv, h}, dtype, 0.0f);
    make(p + "attn_v.weight", {kv, h}, dtype, 0.0f);
    make(p + "attn_output.weight", {h, q}, dtype, 0.0f);
    make(p + "ffn_gate.weight", {f, h}, dtype, 0.0f);
    make(p + "ffn_up.weight", {f, h}, dtype, 0.0f);
    make(p + "ffn_down.weight", {h, f}, dtype, 0.0f);
    if (c.qk_norm) {
      make(p + "attn_q_norm.weight", {c.head_dim}, DType::kF32, 1.0f);
      make(p + "attn_k_norm.weight", {c.head_dim}, DType::kF32, 1.0f);
    }
    if (c.attention_bias) {
      make(p + "attn_q.bias", {q}, DType::kF32, 0.0f);
      make(p + "attn_k.bias", {kv}, DType::kF32, 0.0f);
      make(p + "attn_v.bias", {kv}, DType::kF32, 0.0f);
    }
  }
  return w;
}

const TensorView* WeightStore::Find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

TensorView WeightStore::Get(std::string_view name, std::initializer_list<int64_t> shape) const {
  const TensorView* t = Find(name);
  PG_ENSURE(t != nullptr, kMalformed, "{}: missing tensor '{}'", source_, name);
  bool ok = t->ndim == int(shape.size());
  int i = 0;
  for (int64_t d : shape) ok = ok && t->shape[size_t(i++)] == d;
  if (!ok) {
    std::string want = "[";
    for (int64_t d : shape) want += (want.size() > 1 ? ", " : "") + std::to_string(d);
    Throw(ErrorCode::kMalformed, "{}: tensor '{}' has shape {}, expected {}]", source_, name,
          t->ShapeString(), want);
  }
  return *t;
}

TensorView WeightStore::GetF32(std::string_view name, std::initializer_list<int64_t> shape) {
  TensorView src = Get(name, shape);
  if (src.dtype == DType::kF32) return src;
  PG_ENSURE(quant::CanDequantize(src.dtype), kUnsupported, "{}: tensor '{}' has dtype {}",
            source_, name, Name(src.dtype));
  Tensor t(DType::kF32, src.shape.data(), src.ndim);
  quant::DequantizeRow(src.dtype, src.data, t.data<float>(), src.numel());
  TensorView v = t.view();
  owned_.push_back(std::move(t));
  return v;
}

int64_t WeightStore::total_bytes() const {
  int64_t n = 0;
  for (const auto& [name, v] : tensors_) n += v.nbytes();
  return n;
}

}  // namespace pg::models
