#include "models/moe_loader.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/log.h"
#include "core/status.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "models/deepseek_v3.h"
#include "models/moe_config.h"
#include "models/moe_weights.h"
#include "models/qwen3_moe.h"

namespace pg::models {

std::unique_ptr<Model> LoadMoeModel(const LoadOptions& o, const nlohmann::json& j,
                                    const std::string& folder) {
  MoeModelConfig c = MoeConfigFromHf(j);
  const std::string dir_name = std::filesystem::path(folder).filename().string();
  std::unique_ptr<MoeWeights> w;
  if (o.format == LoadFormat::kDummy) {
    c.base.name = dir_name + " (dummy weights)";
    w = MoeWeights::Dummy(o.dummy_dtype, o.dummy_seed);
  } else {
    c.base.name = dir_name;
    w = MoeWeights::FromSafetensors(io::SafetensorsModel::Open(folder), c.fp8_block_rows,
                                    c.fp8_block_cols);
  }
  PG_LOG_INFO("model: {}", c.Summary());
  if (c.arch == MoeArch::kQwen3Moe) return CreateQwen3Moe(std::move(c), std::move(w));
  return CreateDeepseekV3(std::move(c), std::move(w));
}

std::unique_ptr<Model> LoadMoeModelFromGguf(std::unique_ptr<io::GgufFile> gguf) {
  MoeModelConfig c = MoeConfigFromGguf(*gguf);
  PG_LOG_INFO("model: {}", c.Summary());
  std::unique_ptr<MoeWeights> w = MoeWeights::FromGguf(std::move(gguf));
  if (c.arch == MoeArch::kQwen3Moe) return CreateQwen3Moe(std::move(c), std::move(w));
  return CreateDeepseekV3(std::move(c), std::move(w));
}

std::unique_ptr<Model> CreateDummyMoeModelOnDevice(const MoeModelConfig& config,
                                                   DeviceMemory& memory,
                                                   const DevicePlacement& placement,
                                                   uint64_t seed, bool fp8) {
  PG_ENSURE(!fp8 || config.arch == MoeArch::kDeepseekV3, kUnsupported,
            "{}: fp8 dummy weights are DeepSeek-V3's format only", config.model_type);
  if (config.arch == MoeArch::kQwen3Moe)
    return CreateQwen3MoeOnDevice(config, memory, placement, seed);
  return CreateDeepseekV3OnDevice(config, memory, placement, seed, fp8);
}

bool DeclaresFp8Weights(const nlohmann::json& j) {
  if (!j.contains("quantization_config") || !j["quantization_config"].is_object()) return false;
  const auto& q = j["quantization_config"];
  return q.contains("quant_method") && q["quant_method"].is_string() &&
         q["quant_method"].get<std::string>() == "fp8";
}

}  // namespace pg::models
