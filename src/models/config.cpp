#include "models/config.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "io/gguf.h"

namespace pg::models {
namespace {

bool IsSupportedArch(const std::string& a) { return a == "llama" || a == "qwen2" || a == "qwen3"; }

ops::RopeScaling ParseRopeType(const std::string& t) {
  if (t.empty() || t == "default" || t == "none") return ops::RopeScaling::kNone;
  if (t == "llama3") return ops::RopeScaling::kLlama3;
  if (t == "yarn") return ops::RopeScaling::kYarn;
  if (t == "linear") return ops::RopeScaling::kLinear;
  Throw(ErrorCode::kUnsupported, "rope scaling type '{}' is not supported", t);
}

}  // namespace

void ModelConfig::Validate() const {
  auto bad = [&](const std::string& what) {
    Throw(ErrorCode::kMalformed, "model config ({}): {}", architecture, what);
  };
  if (!IsSupportedArch(architecture))
    Throw(ErrorCode::kUnsupported,
          "architecture '{}' is not supported (supported: llama, qwen2, qwen3)", architecture);
  if (vocab_size <= 0) bad("vocab_size must be > 0");
  if (hidden_size <= 0 || intermediate_size <= 0 || num_layers <= 0) bad("sizes must be > 0");
  if (num_heads <= 0 || num_kv_heads <= 0 || num_heads % num_kv_heads != 0)
    bad(fmt::format("num_heads {} not a multiple of num_kv_heads {}", num_heads, num_kv_heads));
  if (head_dim <= 0 || head_dim % 2 != 0) bad(fmt::format("head_dim {} must be even", head_dim));
  if (rope.rotary_dim < 0 || rope.rotary_dim > head_dim || rope.rotary_dim % 2)
    bad(fmt::format("rotary dim {} invalid for head_dim {}", rope.rotary_dim, head_dim));
  if (max_context <= 0) bad("max_context must be > 0");
  if (!(rms_norm_eps > 0)) bad("rms_norm_eps must be > 0");
}

std::string ModelConfig::Summary() const {
  return fmt::format(
      "{} ({}): {} layers, hidden {}, ffn {}, heads {}/{} x {}, vocab {}, context {}, rope "
      "theta {}{}{}",
      name, architecture, num_layers, hidden_size, intermediate_size, num_heads, num_kv_heads,
      head_dim, vocab_size, max_context, rope.theta, tie_word_embeddings ? ", tied output" : "",
      qk_norm ? ", qk-norm" : "");
}

ModelConfig ConfigFromGguf(const io::GgufFile& g) {
  const std::string arch = g.GetString("general.architecture");
  if (!IsSupportedArch(arch))
    Throw(ErrorCode::kUnsupported,
          "{}: architecture '{}' is not supported (supported: llama, qwen2, qwen3, qwen3moe)",
          g.path(), arch);
  return ConfigFromGgufAs(g, arch);
}

ModelConfig ConfigFromGgufAs(const io::GgufFile& g, const std::string& as) {
  ModelConfig c;
  c.architecture = as;
  const std::string a = g.GetString("general.architecture") + ".";
  c.name = g.GetStringOr("general.name", c.architecture);
  c.hidden_size = int(g.GetInt(a + "embedding_length"));
  // MoE files may leave the dense size out (llama.cpp's qwen3moe reads only the experts').
  c.intermediate_size = int(g.GetIntOr(a + "feed_forward_length",
                                       g.GetIntOr(a + "expert_feed_forward_length", 0)));
  c.num_layers = int(g.GetInt(a + "block_count"));
  c.num_heads = int(g.GetInt(a + "attention.head_count"));
  c.num_kv_heads = int(g.GetIntOr(a + "attention.head_count_kv", c.num_heads));
  c.head_dim = int(g.GetIntOr(a + "attention.key_length", c.num_heads ? c.hidden_size / c.num_heads : 0));
  c.max_context = int(g.GetIntOr(a + "context_length", 4096));
  c.rms_norm_eps = float(g.GetFloatOr(a + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope.theta = float(g.GetFloatOr(a + "rope.freq_base", 10000.0));
  int rot = int(g.GetIntOr(a + "rope.dimension_count", c.head_dim));
  c.rope.rotary_dim = rot == c.head_dim ? 0 : rot;
  c.rope.neox = c.architecture != "llama";
  std::string scaling = g.GetStringOr(a + "rope.scaling.type", "none");
  c.rope.scaling = ParseRopeType(scaling);
  if (c.rope.scaling != ops::RopeScaling::kNone) {
    c.rope.factor = float(g.GetFloatOr(a + "rope.scaling.factor", 1.0));
    c.rope.original_max_position =
        int(g.GetIntOr(a + "rope.scaling.original_context_length", c.max_context));
  }
  if (g.FindTensor("rope_freqs.weight"))
    Throw(ErrorCode::kUnsupported,
          "{}: per-dimension rope frequency factors (rope_freqs.weight, Llama-3.1 GGUF) are not "
          "supported yet; load the HF safetensors checkpoint instead",
          g.path());
  c.qk_norm = c.architecture == "qwen3";
  c.attention_bias = c.architecture == "qwen2";
  const io::GgufTensorInfo* emb = g.FindTensor("token_embd.weight");
  PG_ENSURE(emb != nullptr, kMalformed, "{}: no token_embd.weight tensor", g.path());
  c.vocab_size = int(g.GetIntOr(a + "vocab_size", emb->shape[0]));
  c.tie_word_embeddings = g.FindTensor("output.weight") == nullptr;
  c.bos_token_id = int(g.GetIntOr("tokenizer.ggml.bos_token_id", -1));
  if (const auto* eos = g.Find("tokenizer.ggml.eos_token_id")) c.eos_token_ids.push_back(int(eos->AsInt()));
  if (const auto* eot = g.Find("tokenizer.ggml.eot_token_id")) {
    int id = int(eot->AsInt());
    if (c.eos_token_ids.empty() || c.eos_token_ids[0] != id) c.eos_token_ids.push_back(id);
  }
  c.Validate();
  return c;
}

ModelConfig ConfigFromHf(const nlohmann::json& j) {
  PG_ENSURE(j.is_object(), kMalformed, "config.json: not a JSON object");
  ModelConfig c;
  std::string model_type = ConfigField<std::string>(j, "model_type", "");
  if (model_type == "llama" || model_type == "mistral") c.architecture = "llama";
  else if (model_type == "qwen2") c.architecture = "qwen2";
  else if (model_type == "qwen3") c.architecture = "qwen3";
  else
    Throw(ErrorCode::kUnsupported,
          "config.json: model_type '{}' is not supported (supported: llama, qwen2, qwen3)",
          model_type);
  c.name = ConfigField<std::string>(j, "_name_or_path", model_type);
  c.vocab_size = ConfigField<int>(j, "vocab_size", 0);
  c.hidden_size = ConfigField<int>(j, "hidden_size", 0);
  c.intermediate_size = ConfigField<int>(j, "intermediate_size", 0);
  c.num_layers = ConfigField<int>(j, "num_hidden_layers", 0);
  c.num_heads = ConfigField<int>(j, "num_attention_heads", 0);
  c.num_kv_heads = ConfigField<int>(j, "num_key_value_heads", c.num_heads);
  c.head_dim = ConfigField<int>(j, "head_dim", c.num_heads ? c.hidden_size / c.num_heads : 0);
  c.max_context = ConfigField<int>(j, "max_position_embeddings", 4096);
  c.rms_norm_eps = ConfigField<float>(j, "rms_norm_eps", 1e-6f);
  c.tie_word_embeddings = ConfigField<bool>(j, "tie_word_embeddings", false);
  c.qk_norm = c.architecture == "qwen3";
  c.attention_bias = ConfigField<bool>(j, "attention_bias", c.architecture == "qwen2");
  c.rope.neox = true;
  // transformers 5 nests rope settings in "rope_parameters"; 4.x uses rope_theta + rope_scaling.
  nlohmann::json rp = j.contains("rope_parameters") && j["rope_parameters"].is_object()
                          ? j["rope_parameters"]
                          : (j.contains("rope_scaling") && j["rope_scaling"].is_object()
                                 ? j["rope_scaling"]
                                 : nlohmann::json::object());
  c.rope.theta = ConfigField<float>(rp, "rope_theta", ConfigField<float>(j, "rope_theta", 10000.0f));
  std::string type = ConfigField<std::string>(rp, "rope_type", ConfigField<std::string>(rp, "type", "default"));
  c.rope.scaling = ParseRopeType(type);
  c.rope.factor = ConfigField<float>(rp, "factor", 1.0f);
  c.rope.low_freq_factor = ConfigField<float>(rp, "low_freq_factor", 1.0f);
  c.rope.high_freq_factor = ConfigField<float>(rp, "high_freq_factor", 4.0f);
  c.rope.original_max_position =
      ConfigField<int>(rp, "original_max_position_embeddings", c.max_context);
  c.rope.beta_fast = ConfigField<float>(rp, "beta_fast", 32.0f);
  c.rope.beta_slow = ConfigField<float>(rp, "beta_slow", 1.0f);
  // Absent mscale is 0 (HF: None): the YaRN attention factor is then mscale(factor) alone,
  // whatever mscale_all_dim says (RopeAttentionFactor needs both for the ratio).
  c.rope.mscale = ConfigField<float>(rp, "mscale", 0.0f);
  c.rope.mscale_all_dim = ConfigField<float>(rp, "mscale_all_dim", 0.0f);
  float partial = ConfigField<float>(j, "partial_rotary_factor", 1.0f);
  int rot = int(float(c.head_dim) * partial);
  c.rope.rotary_dim = rot == c.head_dim ? 0 : rot;
  c.bos_token_id = ConfigField<int>(j, "bos_token_id", -1);
  if (auto it = j.find("eos_token_id"); it != j.end()) {
    if (it->is_number_integer()) c.eos_token_ids.push_back(it->get<int>());
    else if (it->is_array())
      for (const auto& e : *it) c.eos_token_ids.push_back(e.get<int>());
  }
  c.Validate();
  return c;
}

}  // namespace pg::models
