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
// `config`'s real shapes with random bf16 weights made on the device, already placed.
std::unique_ptr<Model> CreateQwen3MoeOnDevice(MoeModelConfig config, DeviceMemory& memory,
                                              const DevicePlacement& placement, uint64_t seed);

}  // namespace pg::models
