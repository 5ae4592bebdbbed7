// The sm_90a wgmma prefill attention kernel (prefill_attention_wgmma.cu), internal to
// prefill_attention.cu, which plans and selects it (PrefillAttentionArgs::wgmma).
#pragma once

#include "kernels/cuda/attention/prefill_attention.h"

namespace pg::cuda::prefill {

// Tile of the wgmma kernel: 128 packed query rows (two consumer warpgroups of 64) x 128 keys,
// head_dim 128, bf16 caches only. Split chunks are multiples of kWgmmaBlockN.
constexpr int kWgmmaBlockM = 128;
constexpr int kWgmmaBlockN = 128;
constexpr int kWgmmaHeadDim = 128;

// Launches the attention kernel only (the caller launches the split combine).
void LaunchPrefillWgmma(const PrefillAttentionArgs& a, cudaStream_t stream);

}  // namespace pg::cuda::prefill
