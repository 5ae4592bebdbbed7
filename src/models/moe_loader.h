// Loading of the MoE architectures (moe_config.h), called by LoadModel (loader.cpp) when a
// config.json names one of them.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>

#include "models/model.h"

namespace pg::models {

// `config` is the parsed config.json; `folder` holds it (and the safetensors, unless
// options.format is kDummy). Throws pg::Error like LoadModel.
std::unique_ptr<Model> LoadMoeModel(const LoadOptions& options, const nlohmann::json& config,
                                    const std::string& folder);

}  // namespace pg::models
