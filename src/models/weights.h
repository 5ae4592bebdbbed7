// A model's tensors, by canonical (GGUF-style) name: "token_embd.weight",
// "blk.<i>.attn_q.weight", "output_norm.weight", ... Views point into a mmapped file or into
// tensors owned by the store; either way they live as long as the WeightStore.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace pg::io {
class GgufFile;
class SafetensorsModel;
}  // namespace pg::io

namespace pg::models {

struct ModelConfig;

class WeightStore {
 public:
  static std::unique_ptr<WeightStore> FromGguf(std::unique_ptr<io::GgufFile> file);
  // HF names ("model.layers.3.self_attn.q_proj.weight") are mapped to canonical names.
  static std::unique_ptr<WeightStore> FromSafetensors(std::unique_ptr<io::SafetensorsModel> m);
  // Random weights of the config's real shapes (`--load-format dummy`): N(0, 0.02) in
  // `dtype`, norms 1 + N(0, 0.02) in f32. Deterministic from `seed`.
  static std::unique_ptr<WeightStore> Dummy(const ModelConfig& config, DType dtype, uint64_t seed);
  ~WeightStore();

  const TensorView* Find(std::string_view name) const;  // nullptr if absent
  // The tensor, checked against the expected row-major shape. Throws kMalformed (missing
  // tensor, wrong shape) naming the tensor and the source.
  TensorView Get(std::string_view name, std::initializer_list<int64_t> shape) const;
  // Like Get, but returns an f32 copy owned by the store (small tensors: norms, biases).
  TensorView GetF32(std::string_view name, std::initializer_list<int64_t> shape);
  const std::string& source() const { return source_; }
  int64_t total_bytes() const;  // bytes of all tensors as stored

 private:
  WeightStore() = default;
  void Add(std::string name, TensorView view);

  std::string source_;
  std::unique_ptr<io::GgufFile> gguf_;
  std::unique_ptr<io::SafetensorsModel> safetensors_;
  std::vector<Tensor> owned_;
  std::map<std::string, TensorView, std::less<>> tensors_;
};

// "model.layers.3.mlp.up_proj.weight" -> "blk.3.ffn_up.weight"; unknown names are returned
// unchanged (and simply never looked up).
std::string CanonicalNameFromHf(std::string_view hf_name);
// The inverse: "blk.3.ffn_up.weight" -> "model.layers.3.mlp.up_proj.weight" (and
// "blk.3.ffn_gate_inp.weight" -> "model.layers.3.mlp.gate.weight", the MoE router); unknown
// names are returned unchanged.
std::string HfNameFromCanonical(std::string_view gguf_name);

}  // namespace pg::models
