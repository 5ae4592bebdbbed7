// Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B): Qwen3 attention (GQA, q/k RMSNorm, rope) and a
// softmax-routed top-k MoE feed-forward in the layers decoder_sparse_step / mlp_only_layers
// select (dense SwiGLU elsewhere). Built from ops only.
#pragma once

#include <memory>

#include "models/model.h"
#include "models/moe_config.h"
#include "models/moe_weights.h"

namespace pg::models {

std::unique_ptr<Model> CreateQwen3Moe(MoeModelConfig config, std::unique_ptr<MoeWeights> weights);

}  // namespace pg::models
