// DeepSeek-V3 / Kimi K2 (and DeepSeek-V2-Lite-shaped configs without q_lora): Multi-head
// Latent Attention over a paged latent KV cache (kv_lora_rank + rope dims per token), YaRN
// rope on the decoupled rope dims, and a sigmoid-routed, group-limited MoE with shared
// experts after first_k_dense_replace dense layers. Built from ops only.
//
// Attention: prefill chunks run ops::MlaAttention expanded (per-head K/V from the latents),
// decode batches (every sequence one new token) run it absorbed (W_UK folded into the query).
#pragma once

#include <memory>

#include "models/model.h"
#include "models/moe_config.h"
#include "models/moe_weights.h"

namespace pg::models {

std::unique_ptr<Model> CreateDeepseekV3(MoeModelConfig config, std::unique_ptr<MoeWeights> weights);
// `config`'s real shapes with random weights made on the device, already placed: every
// projection fp8 block-scaled (as DeepSeek's checkpoints) when `fp8`, else bf16.
std::unique_ptr<Model> CreateDeepseekV3OnDevice(MoeModelConfig config, DeviceMemory& memory,
                                                const DevicePlacement& placement, uint64_t seed,
                                                bool fp8);

}  // namespace pg::models
