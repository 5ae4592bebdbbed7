// Loading of the MoE architectures (moe_config.h), called by LoadModel (loader.cpp) when a
// config.json or a GGUF's general.architecture names one of them.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>

#include "models/model.h"
#include "models/moe_config.h"

namespace pg::io {
class GgufFile;
}

namespace pg::models {

// `config` is the parsed config.json; `folder` holds it (and the safetensors, unless
// options.format is kDummy). Throws pg::Error like LoadModel.
std::unique_ptr<Model> LoadMoeModel(const LoadOptions& options, const nlohmann::json& config,
                                    const std::string& folder);
// A llama.cpp GGUF whose architecture IsMoeGgufArch (qwen3moe -> Qwen3-MoE, deepseek2 ->
// DeepSeek-V3): config from its metadata,
// weights mapped as stored (block-quantized experts included), which the CPU kernels read
// directly. Placed on a device, they are dequantized to bf16 row by row (MoeDeviceSource, as a
// dense GGUF's are); that path has not run on the GPU yet.
std::unique_ptr<Model> LoadMoeModelFromGguf(std::unique_ptr<io::GgufFile> gguf);

// A MoE model of `config`'s real shapes made on the device with random weights, already
// placed (`--load-format dummy` for shapes too large for the host): bf16, or for DeepSeek-V3
// with `fp8` every projection fp8 128x128 block-scaled as its checkpoints store them.
std::unique_ptr<Model> CreateDummyMoeModelOnDevice(const MoeModelConfig& config,
                                                   DeviceMemory& memory,
                                                   const DevicePlacement& placement,
                                                   uint64_t seed, bool fp8);
// Whether a config.json declares DeepSeek's fp8 block-scaled weights
// (quantization_config.quant_method "fp8").
bool DeclaresFp8Weights(const nlohmann::json& config);

}  // namespace pg::models
