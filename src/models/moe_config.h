// Typed configuration of the mixture-of-experts architectures (issue 7), parsed from a Hugging
// Face config.json: Qwen3-MoE ("qwen3_moe") and DeepSeek-V3 ("deepseek_v3"; Kimi K2's
// "kimi_k2" is the same architecture). The fields the llama family shares (vocab, hidden,
// layers, heads, rope, eps, eos) live in `base`, parsed by ConfigFromHf.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

#include "kernels/ops_moe.h"
#include "models/config.h"

namespace pg::io {
class GgufFile;
}

namespace pg::models {

enum class MoeArch { kQwen3Moe, kDeepseekV3 };

struct MoeModelConfig {
  MoeArch arch = MoeArch::kQwen3Moe;
  std::string model_type;   // as in config.json ("qwen3_moe", "deepseek_v3", "kimi_k2")
  // Shared fields. base.intermediate_size is the dense MLP's. For DeepSeek-V3, base's
  // num_kv_heads / head_dim describe the latent KV cache as the runtime allocates it:
  // 1 head of ops::MlaCacheHalfDim(kv_lora_rank, qk_rope_head_dim) in each of K and V.
  ModelConfig base;

  // ---- MoE ----
  int num_experts = 0;             // routed experts
  int top_k = 0;                   // num_experts_per_tok
  int moe_intermediate_size = 0;   // per routed expert
  int num_shared_experts = 0;      // DeepSeek: one shared MLP of n_shared * moe_intermediate
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
  ops::MoeScoring scoring = ops::MoeScoring::kSoftmax;
  int n_group = 1, topk_group = 1;
  bool has_score_bias = false;     // e_score_correction_bias (DeepSeek-V3 "noaux_tc")
  int decoder_sparse_step = 1;     // Qwen: layer i is MoE when (i + 1) % step == 0 ...
  std::vector<int> mlp_only_layers;//   ... and i is not listed here
  int first_k_dense_replace = 0;   // DeepSeek: layers [0, k) are dense

  // ---- MLA (DeepSeek-V3) ----
  int q_lora_rank = 0;             // 0: q_proj directly (DeepSeek-V2-Lite, Moonlight)
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  float softmax_scale = 0.0f;      // qk_head_dim^-0.5, times YaRN's mscale(all_dim)^2
  float rope_q_scale = 1.0f;       // YaRN attention factor^2 on the rope part only (HF scales cos/sin)
  // Kimi Linear's MLA layers ("mla_use_nope": true in Moonshot's config.json; transformers'
  // kimi_linear never rotates): q_pe / k_pe are used unrotated, and neither YaRN factor
  // applies (softmax_scale = qk_head_dim^-0.5, rope_q_scale = 1).
  bool mla_use_nope = false;
  int fp8_block_rows = 128, fp8_block_cols = 128;  // quantization_config.weight_block_size

  bool IsMoeLayer(int layer) const;
  int latent_dim() const { return kv_lora_rank + qk_rope_head_dim; }
  // Throws pg::Error(kMalformed) naming the first inconsistent field.
  void Validate() const;
  std::string Summary() const;
};

// Whether config.json's model_type is one of these architectures.
bool IsMoeModelType(const std::string& model_type);
// Throws kUnsupported (other model types, scoring functions) / kMalformed (bad fields).
MoeModelConfig MoeConfigFromHf(const nlohmann::json& config);
// Whether a GGUF's general.architecture is one of these (llama.cpp's "qwen3moe", and
// "deepseek2": DeepSeek-V2 / V2-Lite / V3, Kimi K2, Moonlight as llama.cpp converts them).
bool IsMoeGgufArch(const std::string& arch);
// llama.cpp's keys ("qwen3moe.expert_count", "deepseek2.attention.kv_lora_rank", ...). qwen3moe:
// a layer without a router tensor is dense. deepseek2: see moe_config.cpp for the mapping onto
// the DeepSeek-V3 fields (model_type "deepseek2"). Throws kUnsupported / kMalformed naming the
// key / kNotFound (a required key absent).
MoeModelConfig MoeConfigFromGguf(const io::GgufFile& gguf);

}  // namespace pg::models
