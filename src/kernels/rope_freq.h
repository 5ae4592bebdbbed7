// RoPE frequency tables, computed the way Hugging Face transformers computes `inv_freq`
// (modeling_rope_utils: default, linear, llama3, yarn), in float32 arithmetic as torch does,
// so positions' angles match HF's to the last bit or two.
//
// Angle of pair i at position p: float(inv_freq[i]) * float(p) (a float32 product, as HF's
// `inv_freq @ position_ids`). Shared by every backend (it is plan data, not a kernel).
#pragma once

#include <vector>

#include "kernels/ops.h"

namespace pg::ops {

// The rotary dims actually rotated (config.rotary_dim, or head_dim when 0).
inline int RotaryDim(const RopeConfig& c, int head_dim) {
  return c.rotary_dim == 0 ? head_dim : c.rotary_dim;
}

// [rotary_dim / 2] inverse frequencies (radians per position).
std::vector<float> RopeInvFreq(const RopeConfig& c, int rotary_dim);

// HF's `attention_factor` (YaRN's mscale; 1 for the other scalings). HF multiplies cos and
// sin by it, so q·k over the rotated dims grows by its square; RopeAttentionScale (ops.h)
// returns that square, to multiply the softmax scale by.
float RopeAttentionFactor(const RopeConfig& c);

}  // namespace pg::ops
