// A Hugging Face DeepSeek-V3 checkpoint written as a llama.cpp "deepseek2" GGUF, for the GGUF
// loader's golden test against the HF goldens: the layout of llama.cpp's convert_hf_to_gguf.py
// (conversion/deepseek.py, DeepseekV2Model), each tensor in its stored dtype:
//  * metadata: attention.{q,kv}_lora_rank, rope.dimension_count = qk_rope_head_dim,
//    leading_dense_block_count = first_k_dense_replace, expert_{count,used_count,shared_count,
//    feed_forward_length,weights_scale,weights_norm,gating_func (2: sigmoid),group_count,
//    group_used_count}, YaRN rope.scaling.{type,factor,original_context_length,
//    yarn_log_multiplier = 0.1 * mscale_all_dim};
//  * kv_b: `kSplit` (today's converter): head_count_kv 1, key_length kv_lora + rope,
//    value_length kv_lora, key_length_mla nope + rope, value_length_mla v, and
//    attn_k_b [heads, rank, nope] (W_UK transposed per head) + attn_v_b [heads, v, rank];
//    `kUnsplit` (older files): key_length / value_length the per-head sizes, head_count_kv =
//    heads, attn_kv_b [heads * (nope + v), rank] as HF's kv_b_proj;
//  * blk.N.exp_probs_b.bias = mlp.gate.e_score_correction_bias, shared experts ffn_*_shexp.
// Names are spelled out here, not taken from the loader's table (src/models/weights.cpp).
#pragma once

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "hf_to_gguf.h"

namespace pg::testing {

enum class KvBForm { kSplit, kUnsplit };

inline std::string WriteDeepseek2Gguf(const std::string& dir, const std::string& out,
                                      KvBForm form) {
  const nlohmann::json c = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  StoredTensorCopier st(dir);
  io::testing::GgufBuilder& b = st.builder();
  auto u32 = [&](const std::string& key, const char* field) {
    b.AddU32("deepseek2." + key, c[field].get<uint32_t>());
  };
  b.AddString("general.architecture", "deepseek2");
  const int heads = c["num_attention_heads"].get<int>(), rank = c["kv_lora_rank"].get<int>();
  const int nope = c["qk_nope_head_dim"].get<int>(), rope = c["qk_rope_head_dim"].get<int>();
  const int vd = c["v_head_dim"].get<int>();
  u32("context_length", "max_position_embeddings");
  u32("embedding_length", "hidden_size");
  u32("block_count", "num_hidden_layers");
  u32("feed_forward_length", "intermediate_size");
  u32("vocab_size", "vocab_size");
  u32("attention.head_count", "num_attention_heads");
  u32("attention.q_lora_rank", "q_lora_rank");
  u32("attention.kv_lora_rank", "kv_lora_rank");
  if (form == KvBForm::kSplit) {
    b.AddU32("deepseek2.attention.head_count_kv", 1);
    b.AddU32("deepseek2.attention.key_length", uint32_t(rank + rope));
    b.AddU32("deepseek2.attention.value_length", uint32_t(rank));
    b.AddU32("deepseek2.attention.key_length_mla", uint32_t(nope + rope));
    b.AddU32("deepseek2.attention.value_length_mla", uint32_t(vd));
  } else {
    b.AddU32("deepseek2.attention.head_count_kv", uint32_t(heads));
    b.AddU32("deepseek2.attention.key_length", uint32_t(nope + rope));
    b.AddU32("deepseek2.attention.value_length", uint32_t(vd));
  }
  b.AddF32("deepseek2.attention.layer_norm_rms_epsilon", c["rms_norm_eps"].get<float>());
  u32("rope.dimension_count", "qk_rope_head_dim");
  const nlohmann::json& rp = c["rope_parameters"];
  b.AddF32("deepseek2.rope.freq_base", rp["rope_theta"].get<float>());
  if (rp["rope_type"] == "yarn") {
    b.AddString("deepseek2.rope.scaling.type", "yarn");
    b.AddF32("deepseek2.rope.scaling.factor", rp["factor"].get<float>());
    b.AddU32("deepseek2.rope.scaling.original_context_length",
             rp["original_max_position_embeddings"].get<uint32_t>());
    b.AddF32("deepseek2.rope.scaling.yarn_log_multiplier",
             0.1f * rp["mscale_all_dim"].get<float>());
  }
  u32("leading_dense_block_count", "first_k_dense_replace");
  u32("expert_count", "n_routed_experts");
  u32("expert_used_count", "num_experts_per_tok");
  u32("expert_shared_count", "n_shared_experts");
  u32("expert_feed_forward_length", "moe_intermediate_size");
  u32("expert_group_count", "n_group");
  u32("expert_group_used_count", "topk_group");
  b.AddF32("deepseek2.expert_weights_scale", c["routed_scaling_factor"].get<float>());
  b.AddBool("deepseek2.expert_weights_norm", c["norm_topk_prob"].get<bool>());
  b.AddU32("deepseek2.expert_gating_func", c["scoring_func"] == "softmax" ? 1 : 2);

  st.AddTopLevel();
  const std::pair<const char*, const char*> kLayer[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
      {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
      {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
      {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
      {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"mlp.gate.weight", "ffn_gate_inp.weight"},
      {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},
      {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
      {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
  };
  for (int i = 0; i < c["num_hidden_layers"].get<int>(); ++i) {
    const std::string hf = "model.layers." + std::to_string(i) + ".",
                      g = "blk." + std::to_string(i) + ".";
    for (const auto& [from, to] : kLayer)
      if (st.Has(hf + from)) st.Add(g + to, {hf + from});
    st.AddExperts(hf, g, c["n_routed_experts"].get<int>());
    const std::string kv_b = hf + "self_attn.kv_b_proj.weight";
    if (form == KvBForm::kUnsplit) {
      st.Add(g + "attn_kv_b.weight", {kv_b});
      continue;
    }
    // kv_b [heads * (nope + v), rank] -> k_b[h][r][j] = kv_b[h * (nope + v) + j][r] and
    // v_b[h][j][r] = kv_b[h * (nope + v) + nope + j][r], element by element (any dtype).
    const io::SafetensorsTensorInfo& t = st.Get(kv_b);
    const size_t es = t.nbytes() / size_t(heads * (nope + vd) * rank);
    auto at = [&](int row, int col) {
      return t.data + (size_t(row) * size_t(rank) + size_t(col)) * es;
    };
    io::testing::BuilderTensor k{g + "attn_k_b.weight",
                                 {uint64_t(nope), uint64_t(rank), uint64_t(heads)},
                                 StoredTensorCopier::GgmlType(t.dtype),
                                 {}};
    io::testing::BuilderTensor v{g + "attn_v_b.weight",
                                 {uint64_t(rank), uint64_t(vd), uint64_t(heads)},
                                 StoredTensorCopier::GgmlType(t.dtype),
                                 {}};
    for (int h = 0; h < heads; ++h) {
      for (int r = 0; r < rank; ++r)
        for (int j = 0; j < nope; ++j)
          k.data.insert(k.data.end(), at(h * (nope + vd) + j, r), at(h * (nope + vd) + j, r) + es);
      for (int j = 0; j < vd; ++j)
        for (int r = 0; r < rank; ++r)
          v.data.insert(v.data.end(), at(h * (nope + vd) + nope + j, r),
                        at(h * (nope + vd) + nope + j, r) + es);
    }
    b.AddTensor(std::move(k));
    b.AddTensor(std::move(v));
  }
  return st.WriteTo(out);
}

// The tiny-deepseek-v3 golden checkpoint as a deepseek2 GGUF in the temp directory (one file
// per process and form).
inline std::string TinyDeepseek2Gguf(KvBForm form) {
  const std::string name = std::string("pg_tiny_deepseek2_") +
                           (form == KvBForm::kSplit ? "split" : "kv_b") + "." +
                           std::to_string(::getpid()) + ".gguf";
  return WriteDeepseek2Gguf("tests/data/models/tiny-deepseek-v3",
                            (std::filesystem::temp_directory_path() / name).string(), form);
}

}  // namespace pg::testing
