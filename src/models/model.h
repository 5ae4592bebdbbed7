// The model interface the runtime drives: one forward pass over a batch of tokens from any
// number of sequences, reading and writing a paged KV cache the runtime owns.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/ops.h"
#include "models/config.h"

namespace pg::models {

// The per-layer views of the runtime's KV cache. Pages outlive every Forward call that
// references them.
struct KvCacheLayers {
  std::vector<ops::KvCacheView> layers;  // [num_layers]
};

// Shapes a KV cache must have for this model (per layer, per token).
struct KvSpec {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int64_t BytesPerToken(DType dtype) const {
    return int64_t(num_layers) * 2 * num_kv_heads * head_dim * Info(dtype).block_bytes;
  }
};

struct ForwardBatch {
  std::span<const int32_t> tokens;      // [num_tokens]
  std::span<const int32_t> positions;   // [num_tokens], position of each token in its sequence
  const ops::AttentionBatch* attention = nullptr;
  std::span<const int32_t> logit_rows;  // batch rows whose logits are wanted, ascending
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  KvSpec kv_spec() const {
    const auto& c = config();
    return {c.num_layers, c.num_kv_heads, c.head_dim};
  }
  // Runs the batch; writes its new tokens' K/V into the cache; fills
  // logits [logit_rows.size(), vocab] f32. Not thread-safe (one forward at a time).
  virtual void Forward(const ForwardBatch& batch, const KvCacheLayers& kv, TensorView logits) = 0;
  virtual int64_t weight_bytes() const = 0;
};

enum class LoadFormat { kAuto, kDummy };

struct LoadOptions {
  std::string path;                    // GGUF file, HF folder (config.json + safetensors)
  LoadFormat format = LoadFormat::kAuto;
  DType dummy_dtype = DType::kBF16;    // for kDummy (path then names a config.json or folder)
  uint64_t dummy_seed = 0;
  // Called with (bytes done, bytes total) while weights are paged in.
  std::function<void(int64_t, int64_t)> progress;
};

// Loads any supported architecture. Throws pg::Error: kNotFound (no such file),
// kUnsupported (architecture, dtype), kMalformed (broken file or config).
std::unique_ptr<Model> LoadModel(const LoadOptions& options);

}  // namespace pg::models
