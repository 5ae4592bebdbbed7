// Weights of the MoE architectures, by Hugging Face name ("model.layers.3.mlp.experts.7.
// up_proj.weight"), from a safetensors checkpoint or random (`--load-format dummy`).
//
// DeepSeek's fp8 block-scaled format: a float8_e4m3fn weight W [out, in] with a
// "<name>_scale_inv" f32 tensor S [ceil(out / block_rows), ceil(in / block_cols)] means
// W_real[r, c] = float(W[r, c]) * S[r / block_rows, c / block_cols]. Such weights are
// dequantized to f32 on first use (the CPU path; the GPU path will keep fp8).
//
// Views live as long as the store. Dummy stores create each tensor on its first Get, with the
// shape asked for: N(0, 0.02) in the dummy dtype for matrices, 1 + N(0, 0.02) f32 for norms,
// 0 for biases.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace pg::io {
class GgufFile;
class SafetensorsModel;
}

namespace pg::models {

class MoeWeights {
 public:
  static std::unique_ptr<MoeWeights> FromSafetensors(std::unique_ptr<io::SafetensorsModel> m,
                                                     int fp8_block_rows, int fp8_block_cols);
  // A llama.cpp GGUF: each tensor under its HF name (weights.h HfNameFromCanonical); the
  // stacked experts "blk.<i>.ffn_{gate,up,down}_exps.weight" [experts, out, in] become
  // "model.layers.<i>.mlp.experts.<e>.{gate,up,down}_proj.weight" views of one expert each.
  // Block-quantized tensors stay as stored (the CPU matmuls read them directly).
  // llama.cpp "deepseek2" files: "blk.<i>.exp_probs_b.bias" is the router's
  // "mlp.gate.e_score_correction_bias"; the split "attn_k_b" [heads, rank, nope] +
  // "attn_v_b" [heads, v, rank] are joined into one "self_attn.kv_b_proj.weight"
  // [heads * (nope + v), rank] copy (kept in the stored float type, else f32; SplitKvB gives
  // the two stored tensors); the unsplit "attn_kv_b" (older files) is a view as any other.
  static std::unique_ptr<MoeWeights> FromGguf(std::unique_ptr<io::GgufFile> file);
  static std::unique_ptr<MoeWeights> Dummy(DType dtype, uint64_t seed);
  ~MoeWeights();

  bool Has(std::string_view name) const;
  // The stored halves of a kv_b_proj joined from llama.cpp's split form (FromGguf): views of
  // attn_k_b [heads, rank, nope] and attn_v_b [heads, v, rank] as in the file; nullopt for any
  // other tensor.
  struct SplitKvB {
    TensorView k_b, v_b;
  };
  std::optional<SplitKvB> GetSplitKvB(std::string_view kv_b_name) const;
  // A matrix/embedding, checked against `shape` (kMalformed naming the tensor otherwise);
  // fp8 block-scaled weights come back dequantized to f32.
  TensorView Get(const std::string& name, std::initializer_list<int64_t> shape);
  // An f32 copy (norm weights, biases); `dummy_value` is the dummy store's mean.
  TensorView GetF32(const std::string& name, std::initializer_list<int64_t> shape,
                    float dummy_value = 1.0f);
  // A matrix as stored, for the device paths (which keep fp8 on the device): fp8 block-scaled
  // weights come back fp8 with their scale_inv ([ceil(out / block_rows), ceil(in /
  // block_cols)]); anything else as Get (scale_inv empty). Checked against `shape`.
  struct Stored {
    TensorView w, scale_inv;
  };
  Stored GetStored(const std::string& name, std::initializer_list<int64_t> shape);
  // Whether `name` is stored fp8 block-scaled (never for dummy stores).
  bool IsStoredFp8(std::string_view name) const;
  int block_rows() const { return block_rows_; }
  int block_cols() const { return block_cols_; }
  int64_t total_bytes() const { return total_bytes_; }  // as stored (fp8 counts 1 byte)
  const std::string& source() const { return source_; }

 private:
  MoeWeights() = default;
  TensorView Own(Tensor t);
  TensorView DummyTensor(std::initializer_list<int64_t> shape, DType dtype, float mean,
                        uint64_t seed);

  std::string source_;
  // The stored tensor `name` (HF name) as in the file; nullopt when absent (always for dummy
  // stores).
  std::optional<TensorView> FindStored(const std::string& name) const;
  // `name` as the file spells it, for errors: the GGUF name of a GGUF store's tensor (a stacked
  // expert as "blk.3.ffn_up_exps.weight[7]"), else the HF name.
  std::string FileName(const std::string& name) const;

  std::unique_ptr<io::SafetensorsModel> st_;
  std::unique_ptr<io::GgufFile> gguf_;
  std::map<std::string, TensorView, std::less<>> gguf_views_;  // by HF name
  std::map<std::string, SplitKvB, std::less<>> split_kv_b_;  // kv_b_proj joined from these
  int block_rows_ = 128, block_cols_ = 128;
  bool dummy_ = false;
  DType dummy_dtype_ = DType::kBF16;
  uint64_t seed_ = 0;
  int64_t total_bytes_ = 0;
  std::vector<Tensor> owned_;
  std::map<std::string, TensorView, std::less<>> cache_;  // dequantized / dummy / f32 copies
};

// W_real = float(w) * scale_inv per block (see above). w: [out, in] fp8 e4m3; scale_inv:
// [ceil(out/br), ceil(in/bc)] f32 (or bf16). Throws kMalformed on mismatched shapes.
Tensor DequantizeFp8BlockScaled(const TensorView& w, const TensorView& scale_inv, int block_rows,
                                int block_cols, const std::string& name);

}  // namespace pg::models
