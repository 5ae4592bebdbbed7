// The model interface the runtime drives: one forward pass over a batch of tokens from any
// number of sequences, reading and writing a paged KV cache the runtime owns.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
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
  std::span<const int32_t> tokens;      // [num_tokens] (host; ids are checked against vocab here)
  std::span<const int32_t> positions;   // [num_tokens], position of each token in its sequence
  const ops::AttentionBatch* attention = nullptr;
  std::span<const int32_t> logit_rows;  // batch rows whose logits are wanted, ascending
  // Device-resident models only: the same tokens and positions already on the device
  // ([num_tokens] i32 each), at addresses the runtime keeps fixed across CUDA graph replays.
  TensorView device_tokens, device_positions;
};

// Device memory a runtime lends a model (DESIGN.md example 5: a model never calls CUDA; the
// runtime implements this over its arena). Allocations live as long as this object.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual Device device() const = 0;
  // `bytes` of device memory (256-byte aligned). Throws kResourceExhausted when full.
  virtual void* Allocate(size_t bytes) = 0;
  // Synchronous copies (start-up and tests only, never on the hot path).
  virtual void CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  // Fills `count` elements (bf16, f32 or fp8 e4m3) with mean + std * (approximately normal
  // noise), deterministic from `seed`: dummy weights of real shapes without a host copy.
  virtual void FillRandom(void* dst, DType dtype, int64_t count, float mean, float std,
                          uint64_t seed) = 0;
};

struct DevicePlacement {
  // Activation scratch for batches of up to this many tokens (carved once, at placement).
  int64_t max_batch_tokens = 0;
  // Dense models' projection matrices (not embeddings / lm_head): kBF16, or kF8E4M3 with a
  // per-tensor scale (quantized at placement; dummy: random fp8).
  DType weight_dtype = DType::kBF16;
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

  // Moves the model to `memory`'s device: weights as bf16 matrices (norms and biases f32),
  // activation scratch for DevicePlacement::max_batch_tokens, all allocated from `memory` now.
  // Afterwards Forward takes device_tokens/device_positions, a bf16 device KV cache, and
  // writes bf16 device logits; the memory must outlive the model's last Forward.
  // Throws kUnsupported for models without a device path.
  virtual void PlaceOnDevice(DeviceMemory& memory, const DevicePlacement& placement) {
    (void)memory, (void)placement;
    Throw(ErrorCode::kUnsupported, "{}: no device path", config().architecture);
  }
  virtual bool on_device() const { return false; }
  // Does now what the first host Forward would do once (pack weights for the CPU kernels,
  // cpu_pack.h), so a server's first request does not wait for it. Not for a model that will
  // be placed on a device (it would only cost memory there).
  virtual void PrepareHost() {}
  // Bytes of weights every decode step streams (all matrices except the input embedding,
  // which is gathered by row); the numerator of the decode bandwidth floor.
  virtual int64_t streamed_weight_bytes() const { return weight_bytes(); }
  // Bytes of weights the last (device) Forward read: streamed_weight_bytes() for dense
  // models; MoE models count their dense weights plus, per layer, the distinct routed experts
  // that forward chose (reading the routes back: a synchronisation, for benchmarks only).
  virtual int64_t last_forward_weight_bytes() const { return streamed_weight_bytes(); }
  // The smallest RoutingMargin (moe_layer.h) over the MoE layers for the last token of the
  // last host (f32) Forward; +inf for dense models. GPU tests use the f32 path as the oracle
  // of routing near-ties: a bf16 device path may flip an expert choice there.
  virtual float last_routing_margin() const { return std::numeric_limits<float>::infinity(); }
};

// A model of `config`'s real shapes created directly on the device with random weights
// (`--load-format dummy` for shapes too large to generate on the host), already placed.
std::unique_ptr<Model> CreateDummyModelOnDevice(const ModelConfig& config, DeviceMemory& memory,
                                                const DevicePlacement& placement, uint64_t seed);

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
