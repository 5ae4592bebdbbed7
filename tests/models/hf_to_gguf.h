// Hugging Face MoE checkpoints (config.json + safetensors) written as llama.cpp GGUFs, for the
// GGUF MoE loader's golden tests: Qwen3-MoE as "qwen3moe", DeepSeek-V3 as "deepseek2" (below).
// Qwen3-MoE: the same weights in their stored
// dtype (bf16 stays bf16), so the file holds exactly the golden model. The layout is the one
// tools/golden/make_qwen3moe_gguf.py --from-hf writes (whose random files llama.cpp itself
// reads in the llama.cpp golden tests): experts stacked in blk.<i>.ffn_{gate,up,down}_exps
// ([experts, out, in] row-major), the router as blk.<i>.ffn_gate_inp, a layer without one
// dense. Written with the tests' own GGUF writer (tests/unit/io/gguf_builder.h), not the
// reader under test; made at test time so the repository does not hold the weights twice.
#pragma once

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "io/safetensors.h"
#include "unit/io/gguf_builder.h"

namespace pg::testing {

// The checkpoint's tensors, copied into a GGUF builder in their stored dtype.
class StoredTensorCopier {
 public:
  explicit StoredTensorCopier(const std::string& dir) : st_(io::SafetensorsModel::Open(dir)) {}
  io::testing::GgufBuilder& builder() { return b_; }
  bool Has(const std::string& hf) const { return st_->FindTensor(hf) != nullptr; }
  const io::SafetensorsTensorInfo& Get(const std::string& hf) const { return st_->GetTensor(hf); }
  static uint32_t GgmlType(DType t) {
    return t == DType::kBF16 ? 30 : t == DType::kF16 ? 1 : 0;  // ggml type ids; else f32
  }
  // One tensor from the stacked `parts` (same shape and dtype each); `ne` in GGUF order.
  void Add(const std::string& name, const std::vector<std::string>& parts) {
    const io::SafetensorsTensorInfo& t0 = st_->GetTensor(parts[0]);
    io::testing::BuilderTensor t{name, {}, GgmlType(t0.dtype), {}};
    for (int d = t0.ndim - 1; d >= 0; --d) t.ne.push_back(uint64_t(t0.shape[size_t(d)]));
    if (parts.size() > 1) t.ne.push_back(parts.size());
    for (const std::string& p : parts) {
      const io::SafetensorsTensorInfo& ti = st_->GetTensor(p);
      t.data.insert(t.data.end(), ti.data, ti.data + ti.nbytes());
    }
    b_.AddTensor(std::move(t));
  }
  // token_embd, output_norm and (untied) output.
  void AddTopLevel() {
    Add("token_embd.weight", {"model.embed_tokens.weight"});
    Add("output_norm.weight", {"model.norm.weight"});
    if (Has("lm_head.weight")) Add("output.weight", {"lm_head.weight"});
  }
  // The expert tensors of layer `hf` ("model.layers.3.") stacked as `g`ffn_<proj>_exps.
  void AddExperts(const std::string& hf, const std::string& g, int experts) {
    for (const char* proj : {"gate", "up", "down"}) {
      std::vector<std::string> parts;
      for (int e = 0; e < experts; ++e)
        parts.push_back(hf + "mlp.experts." + std::to_string(e) + "." + proj + "_proj.weight");
      if (Has(parts[0])) Add(g + "ffn_" + proj + "_exps.weight", parts);
    }
  }
  std::string WriteTo(const std::string& out) const {
    const std::vector<uint8_t> bytes = b_.Build().bytes;
    std::ofstream(out, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    return out;
  }

 private:
  std::unique_ptr<io::SafetensorsModel> st_;
  io::testing::GgufBuilder b_;
};

// Writes `dir`'s checkpoint to `out`; returns `out`.
inline std::string WriteQwen3MoeGguf(const std::string& dir, const std::string& out) {
  const nlohmann::json c = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  StoredTensorCopier st(dir);
  io::testing::GgufBuilder& b = st.builder();
  b.AddString("general.architecture", "qwen3moe");
  const std::string a = "qwen3moe.";
  b.AddU32(a + "context_length", c["max_position_embeddings"].get<uint32_t>());
  b.AddU32(a + "embedding_length", c["hidden_size"].get<uint32_t>());
  b.AddU32(a + "block_count", c["num_hidden_layers"].get<uint32_t>());
  b.AddU32(a + "feed_forward_length", c["intermediate_size"].get<uint32_t>());
  b.AddU32(a + "attention.head_count", c["num_attention_heads"].get<uint32_t>());
  b.AddU32(a + "attention.head_count_kv", c["num_key_value_heads"].get<uint32_t>());
  b.AddU32(a + "attention.key_length", c["head_dim"].get<uint32_t>());
  b.AddU32(a + "attention.value_length", c["head_dim"].get<uint32_t>());
  b.AddF32(a + "attention.layer_norm_rms_epsilon", c["rms_norm_eps"].get<float>());
  b.AddF32(a + "rope.freq_base", c["rope_parameters"]["rope_theta"].get<float>());
  const int experts = c["num_local_experts"].get<int>();
  b.AddU32(a + "expert_count", uint32_t(experts));
  b.AddU32(a + "expert_used_count", c["num_experts_per_tok"].get<uint32_t>());
  b.AddU32(a + "expert_feed_forward_length", c["moe_intermediate_size"].get<uint32_t>());
  st.AddTopLevel();
  // llama.cpp's names, spelled out here on purpose rather than taken from the loader's table
  // (src/models/weights.cpp): a wrong entry there must not be repeated by the test's writer.
  const std::pair<const char*, const char*> kLayer[] = {
      {"input_layernorm", "attn_norm"},   {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},     {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"}, {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"}, {"post_attention_layernorm", "ffn_norm"},
      {"mlp.gate_proj", "ffn_gate"},      {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},      {"mlp.gate", "ffn_gate_inp"},
  };
  for (int i = 0; i < c["num_hidden_layers"].get<int>(); ++i) {
    const std::string hf = "model.layers." + std::to_string(i) + ".", g = "blk." + std::to_string(i) + ".";
    for (const auto& [from, to] : kLayer)
      if (st.Has(hf + from + ".weight")) st.Add(g + to + ".weight", {hf + from + ".weight"});
    st.AddExperts(hf, g, experts);
  }
  return st.WriteTo(out);
}

// The tiny-qwen3-moe golden checkpoint as a GGUF in the temp directory (one file per process,
// so concurrent test runs do not write each other's).
inline std::string TinyQwen3MoeGguf() {
  const std::string name = "pg_tiny_qwen3_moe." + std::to_string(::getpid()) + ".gguf";
  return WriteQwen3MoeGguf("tests/data/models/tiny-qwen3-moe",
                           (std::filesystem::temp_directory_path() / name).string());
}

}  // namespace pg::testing
