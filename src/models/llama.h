// The llama family: Llama 2/3.x, SmolLM2, Qwen2/2.5 (qkv bias), Qwen3 (q/k norm), with
// tied or untied output embeddings. Built from ops only (DESIGN.md example 5).
#pragma once

#include <memory>

#include "models/model.h"
#include "models/weights.h"

namespace pg::models {

std::unique_ptr<Model> CreateLlama(ModelConfig config, std::unique_ptr<WeightStore> weights);

}  // namespace pg::models
