// Split planning shared by decode_attention.cu (the unfused decode kernels, which define it)
// and decode_fused_plan.cu (the fused kernel's plans). Host only.
#pragma once

#include <cstdint>

#include "kernels/cuda/common/device_params.h"

namespace pg::cuda::decode {

// The decode kernels' A/B knobs over the args' defaults (min_split_keys, PDL trigger, L2
// prefetch; decode_attention.cu states them); stream: the launch runs the streaming kernel.
void ApplyKnobs(AttentionArgs& a, bool stream = false);
// Splits per sequence of a batch of num_seqs decode rows planned for max_len keys: the fewest
// with the least work per resident block slot (fused: the fused kernel's grid shape).
int PlanSplits(const AttentionArgs& a, int num_seqs, int64_t max_len, bool fused);
// AttentionArgs::wave_splits: the cap on a short sequence's splits, from the blocks resident
// at once over the blocks a split of the batch takes (fused: the fused kernel's shape).
void SetWaveSplits(AttentionArgs& a, bool fused = false);

}  // namespace pg::cuda::decode
