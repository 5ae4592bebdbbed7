// Typed model configuration, read from GGUF metadata or a Hugging Face config.json.
// One struct for every architecture of the llama family (Llama 2/3.x, SmolLM2, Qwen2/2.5,
// Qwen3): the differences are flags, not subclasses.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/ops.h"

namespace pg::io {
class GgufFile;
}

namespace pg::models {

enum class WeightFormat { kGguf, kSafetensors, kDummy };

struct ModelConfig {
  std::string architecture;   // "llama", "qwen2", "qwen3"
  std::string name;           // human-readable (general.name or the folder name)
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int max_context = 0;        // tokens
  float rms_norm_eps = 1e-5f;
  ops::RopeConfig rope;
  bool tie_word_embeddings = false;
  bool qk_norm = false;        // Qwen3: RMSNorm over head_dim on q and k before RoPE
  bool attention_bias = false; // Qwen2: bias on q/k/v projections
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;

  // Throws pg::Error(kMalformed) naming the first inconsistent field (heads not dividing,
  // zero sizes, head_dim odd, ...).
  void Validate() const;
  std::string Summary() const;  // one line for the start-up log
};

// A config.json field, or `def` when absent or null. Throws pg::Error(kMalformed) naming the
// field when it has the wrong type. Shared by every architecture's config parser.
template <typename T>
T ConfigField(const nlohmann::json& j, const char* key, T def) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    Throw(ErrorCode::kMalformed, "config.json: field '{}' has the wrong type ({})", key,
          it->type_name());
  }
}

// GGUF metadata "<arch>.*" keys. The rope style follows llama.cpp's conversion: GGUF llama
// weights have q/k rows permuted for interleaved rotation (neox = false); qwen2/3 keep HF's
// rotate-half layout (neox = true).
ModelConfig ConfigFromGguf(const io::GgufFile& gguf);
// The same fields of a GGUF of another general.architecture (whose "<arch>.*" keys are read)
// as the dense architecture `as` it shares them with (qwen3moe's as "qwen3": q/k norm, rotate-
// half rope). Validated as `as`.
ModelConfig ConfigFromGgufAs(const io::GgufFile& gguf, const std::string& as);
// HF config.json (transformers 4.x "rope_theta"/"rope_scaling" and 5.x "rope_parameters").
ModelConfig ConfigFromHf(const nlohmann::json& config);

}  // namespace pg::models
