// Tensor-core paged prefill attention (FlashAttention-2 style, mma.sync m16n8k16 bf16, f32
// online softmax) for the query rows of multi-token sequences (prefill chunks attending to a
// cached prefix and to themselves). Single-token rows stay with the decode kernel
// (decode_attention.cu); ops::Attention's CUDA launcher routes q_len >= 2 here.
//
// Work decomposition: GQA query heads are packed into the tile's rows. Sequence s has
// q_len * group "packed rows" for kv head kvh, packed row r = token * group + g (token in
// [0, q_len), g in [0, group)), query head kvh * group + g. A block owns block_m packed rows
// of one sequence, one kv head and one split of the key range; it streams that split's keys
// in tiles of 64 from the paged cache (cp.async, 2-3 tiles in flight) and masks only the tiles
// that cross a row's causal (or sliding-window) bound. num_splits > 1 (long prefixes with few
// new tokens) writes unnormalised partials that PrefillCombineKernel merges.
// On sm_90 with head_dim 128 and bf16 caches the blocks run the wgmma kernel
// (prefill_attention_wgmma.cu: FlashAttention-3 style, 128 x 128 tiles, ping-pong warpgroups);
// PlanPrefillAttention picks the kernel (PrefillAttentionArgs::wgmma).
#pragma once

#include "kernels/cuda/common/device_params.h"

namespace pg::cuda {

struct PrefillAttentionArgs {
  const bf16* q;        // [num_tokens, heads, head_dim], row stride q_stride
  bf16* out;            // [num_tokens, heads, head_dim], row stride out_stride
  const void* k_cache;  // [num_pages, page_size, kv_heads, head_dim]: bf16, or fp8 e4m3
  const void* v_cache;  //   holding value / scale (ops.h KvCacheView) when kv_fp8
  bool kv_fp8;
  DeviceBatchView batch;
  // Split-K partials (num_splits > 1 only), indexed by ((row * heads + head) * num_splits + split):
  float* partial_acc;   // [.., head_dim] unnormalised sum of p * v
  float* partial_ml;    // [.., 2]: running max (log2 domain) and sum of p
  int64_t q_stride, out_stride;
  int heads, kv_heads, head_dim;
  int min_q_len;        // sequences with q_len < min_q_len are not touched (decode kernel's)
  int block_m;          // packed rows per block: 64 or 128 (fp8 caches: 64)
  // Kernel choice (PlanPrefillAttention): the sm_90a wgmma kernel (prefill_attention_wgmma.cu,
  // 128 x 128 tiles; the plan sets block_m = 128) takes head_dim 128, bf16 caches on compute
  // capability 9.x unless allow_wgmma is false or PEREGRINE_PREFILL_WGMMA=0 (A/B); else the
  // mma.sync kernel with the block_m asked for.
  bool allow_wgmma = true;  // input
  bool wgmma = false;       // output of the plan
  int num_tiles;        // grid.x: sum over handled sequences of ceil(q_len * group / block_m)
  int num_splits, chunk;  // chunk: key positions per split, a multiple of the key tile (64 / 128)
  float logit_scale;      // softmax scale * k_scale
  float v_scale;
  float softcap;          // 0 = none
  int sliding_window;     // 0 = none
};

// Head dims with a compiled tensor-core specialisation (others: paged_attention.cu's row kernel).
bool PrefillAttentionSupportsHeadDim(int head_dim);
// Fills a.num_tiles, a.num_splits and a.chunk for the host copy of the batch's q_len / kv_len
// ([num_seqs] each), given a.heads, a.kv_heads, a.head_dim, a.min_q_len, a.kv_fp8 and
// a.block_m (set to 64 for fp8, 128 for the wgmma kernel), a.allow_wgmma; sets a.wgmma.
// Split-K when the tiles alone do not fill the GPU (long cached prefixes with few new
// tokens): the split count minimises (waves of blocks) / splits, splits of >= 256 keys.
// force_splits > 0 overrides the heuristic (benchmarks). a.num_tiles == 0: nothing to do.
void PlanPrefillAttention(PrefillAttentionArgs& a, const int32_t* q_len, const int32_t* kv_len,
                          int num_seqs, int force_splits = 0);
// Launches the attention kernel (and the split combine when num_splits > 1).
void LaunchPrefillAttention(const PrefillAttentionArgs& a, cudaStream_t stream);

}  // namespace pg::cuda
