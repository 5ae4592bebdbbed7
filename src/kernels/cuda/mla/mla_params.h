// Parameter structs and launchers of the CUDA Multi-head Latent Attention kernels (ops_moe.h:
// MlaCacheWrite, MlaAttention). Device code takes raw pointers and one of these structs; the
// host launchers (mla_register.cpp) validate and fill them.
//
// Latent cache (ops_moe.h): per token a row of L = kv_lora_rank + rope_dim values, elements
// [0, half) in k_cache and [half, L) in v_cache, half = MlaCacheHalfDim. Stored bf16, or fp8
// e4m3 with per-tensor scales (real = stored * k_scale for the k half, * v_scale for the v
// half). The attention kernels are compiled for DeepSeek's latent shape (rank 512, rope 64:
// half 288, every row 16-byte aligned in both dtypes).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common/device_params.h"

namespace pg::cuda {

inline constexpr int kMlaRank = 512;                  // kv_lora_rank of the compiled kernels
inline constexpr int kMlaRope = 64;                   // rope_dim
inline constexpr int kMlaLatent = kMlaRank + kMlaRope;  // 576
inline constexpr int kMlaHalf = kMlaLatent / 2;         // 288

enum class MlaCacheType : uint8_t { kBF16, kFP8 };

// Writes latent rows of the batch's new tokens into their cache slots (any latent_dim).
struct MlaCacheWriteArgs {
  const bf16* latent;  // [num_tokens, latent_dim], row stride latent_stride
  void* k_cache;       // [pages, page_size, 1, half] of cache_type
  void* v_cache;
  DeviceBatchView batch;
  int64_t latent_stride;
  int latent_dim, half;
  MlaCacheType cache_type;
  float inv_k_scale, inv_v_scale;  // stored = real * inv_scale (fp8; bf16: 1)
};

// Copies sequences' whole latent history (positions [0, kv_len)) into a packed bf16 buffer:
// history row (hist_start[s] + t) = latent of sequence s at position t, scaled to real values.
// hist_start: device [num_seqs] (prefix sums of kv_len).
struct MlaGatherArgs {
  const void* k_cache;
  const void* v_cache;
  bf16* out;                  // [total_history, kMlaLatent]
  const int32_t* hist_start;  // [num_seqs]
  DeviceBatchView batch;
  int max_kv_len;
  MlaCacheType cache_type;
  float k_scale, v_scale;
};

// Key positions of one split of a sequence of kv_len keys over num_splits splits: read from the
// device batch by the decode kernel and the combines alike, so one captured graph (fixed
// num_splits) serves every length. A multiple of the key tile (32), at least min_chunk keys
// (MlaDecodePlan::min_chunk, a multiple of 32: one or two tiles).
// Default one tile: batch 1 at 1K keys then runs 32 splits of one tile instead of 16 of two
// (V2-Lite step 1948 -> 1924 us, docs/PERF.md "CUDA MLA").
inline constexpr int kMlaMinChunk = 32;
__host__ __device__ inline int MlaSplitChunk(int kv_len, int num_splits, int min_chunk) {
  const int per = (kv_len + num_splits - 1) / num_splits;
  const int chunk = (per + 31) / 32 * 32;
  return chunk < min_chunk ? min_chunk : chunk;
}

// Absorbed attention over the latents. Query rows of sequence s are its (position i, head h)
// pairs, r = i * heads + h, r in [0, q_len * heads); a block owns kMlaDecodeRows of them and
// one split (key positions [split * chunk, (split + 1) * chunk), chunk = MlaSplitChunk) of the
// sequence's history:
// each latent tile it loads serves every head and query position of its rows. Causal: the
// row of position i sees keys [0, kv_len - q_len + i].
struct MlaDecodeArgs {
  const bf16* q_lat;   // [num_tokens, heads, kMlaLatent]: [W_UK^T q_nope, q_pe], packed
  const void* k_cache;
  const void* v_cache;
  bf16* o_lat;         // [num_tokens, heads, kMlaRank], packed (num_splits == 1)
  float* partial_acc;  // [num_tokens, heads, num_splits, kMlaRank] (num_splits > 1)
  float* partial_ml;   // [num_tokens, heads, num_splits, 2]: max (log2 domain), sum
  DeviceBatchView batch;
  int heads;
  int row_groups;      // blocks per sequence along the rows: ceil(max q_len * heads / rows)
  int num_splits;      // splits per sequence (chunk from each sequence's kv_len on the device)
  int min_chunk = kMlaMinChunk;  // MlaSplitChunk's floor (the plan's)
  float logit_scale_log2;  // softmax scale * log2(e)
  MlaCacheType cache_type;
  float k_scale, v_scale;
};

// Expanded (prefill) attention, FlashAttention style, for one compiled shape:
// q [num_tokens, heads, NOPE + ROPE], keys k_h(t) = [kv[t, h, 0:NOPE], rope[t, :]],
// values v_h(t) = kv[t, h, NOPE:NOPE + V], history row of (seq s, position t) =
// hist_start[s] + t. Causal as above.
struct MlaPrefillArgs {
  const bf16* q;         // [num_tokens, heads, NOPE + ROPE], row stride q_stride
  const bf16* kv;        // [total_history, heads, NOPE + V] (W_UK / W_UV applied), packed
  const bf16* rope;      // [total_history, ...] shared rope key, row stride rope_stride
  bf16* out;             // [num_tokens, heads, V], row stride out_stride
  const int32_t* hist_start;  // [num_seqs]
  DeviceBatchView batch;
  int64_t q_stride, rope_stride, out_stride;
  int heads, max_q_len;
  float logit_scale_log2;
};

// Any latent shape (tiny test models; rank != 512 or rope != 64): absorbed attention with
// one block per (query row, head), f32 scalar math. q_lat [num_tokens, heads, rank + rope],
// o_lat [num_tokens, heads, rank], both packed; cache rows of `half` values per half.
struct MlaGenericArgs {
  const bf16* q_lat;
  const void* k_cache;
  const void* v_cache;
  bf16* o_lat;
  DeviceBatchView batch;
  int heads, rank, rope, half;
  float logit_scale_log2;
  MlaCacheType cache_type;
  float k_scale, v_scale;
};

// Per-head products without cuBLASLt (shapes it refuses: odd sizes / alignments):
//   out[t, h, j] = sum_i x[t, h * x_head + i] * w[h * w_head + (w_km ? i * ldw + j : j * ldw + i)]
// for i < k, j < m; x rows of stride ldx, out rows of stride ldo, head h's out at h * o_head.
struct MlaHeadGemmArgs {
  const bf16* x;
  const bf16* w;
  bf16* out;
  int64_t tokens, heads, k, m, ldx, x_head, ldw, w_head, ldo, o_head;
  bool w_km;
};

// Merges num_splits partials into o_lat (bf16, packed [num_tokens, heads, kMlaRank]).
struct MlaCombineArgs {
  const float* partial_acc;
  const float* partial_ml;
  bf16* o_lat;
  DeviceBatchView batch;
  int heads, num_splits;
  int min_chunk = kMlaMinChunk;  // as MlaDecodeArgs::min_chunk
};

// ---- fused decode-path kernels (mla_fused.cu), all launched with PDL -----------------------

// kv_a_layernorm + k_pe RoPE + cache write, one block per new token (any latent shape):
//   latent[t, :rank] = bf16(c * rsqrt(mean(c^2) + eps) * norm_w)      (when norm_weight)
//   latent[t, rank:] = bf16(RoPE(k_pe, positions[t]))                  (when positions)
// both in place (exactly RmsNorm; Rope; as the separate kernels round), then the row is
// written to its cache slot as MlaCacheWriteArgs.
struct MlaKvPrepArgs {
  MlaCacheWriteArgs write;   // latent (written through: in place), cache, batch
  const void* norm_weight;   // [rank] of norm_type; null: no norm
  WeightType norm_type;
  float eps;
  const int32_t* positions;  // [num_tokens]; null: no rotation
  int rank;                  // latent[:, :rank] normed, latent[:, rank:] rotated
  bool neox;
  float inv_freq[kMaxRopePairs];  // [rope / 2]
};

// The q side of absorbed MLA for a few tokens (T <= kMlaFoldMaxTokens):
//   q_lat[t, h, :rank] = q[t, h, :nope] · W_UK_h        (W_UK_h = w rows h * w_head .. + nope)
//   q_lat[t, h, rank:] = RoPE(q[t, h, nope:], positions[t])  (also written back into q; no
//                        positions: a copy)
// grid (max(rank / 64, T), heads (+ 1 with_prep)); each block streams its 64-column slice of
// W_UK_h before PdlWait. with_prep: the extra row of blocks runs MlaKvPrep for token x (the
// cache write of the same step, independent of the q side).
inline constexpr int kMlaFoldMaxTokens = 4;
inline constexpr int kMlaFoldMaxNope = 128;  // rows of W_UK_h held in registers (4 per thread)
struct MlaQAbsorbArgs {
  bf16* q;               // [tokens, heads, nope + rope], row stride q_stride (q_pe rotated in place)
  const bf16* w;         // w_kv_b: [heads * w_head, rank], row stride ldw
  bf16* q_lat;           // [tokens, heads, rank + rope], packed
  const int32_t* positions;  // [tokens] or null
  int64_t q_stride, ldw, w_head;
  int tokens, heads, nope, rope, rank;
  bool neox;
  float inv_freq[kMaxRopePairs];
  bool with_prep;
  MlaKvPrepArgs prep;
};

// Split merge + W_UV for a few tokens (T <= kMlaFoldMaxTokens), rank kMlaRank:
//   o[t, h, :] = merge of the splits of row (t, h) (f32; num_splits == 1: o_lat as written)
//   out[t, h, j] = sum_c o[t, h, c] * W_UV_h[j, c]       (W_UV_h = w rows h * w_head + nope + j)
// grid (ceil(v / 32), heads); each block holds its 32 rows of W_UV_h in registers, loaded
// before PdlWait.
struct MlaCombineApplyArgs {
  MlaCombineArgs combine;  // partials (num_splits > 1) or o_lat (num_splits == 1)
  const bf16* w;           // w_kv_b + nope * ldw: row (h * w_head + j) is W_UV_h[j]
  bf16* out;               // [tokens, heads, v], row stride out_stride
  int64_t ldw, w_head, out_stride;
  int tokens, v;
};

void LaunchMlaCacheWrite(const MlaCacheWriteArgs& a, cudaStream_t stream);
void LaunchMlaHistStart(const DeviceBatchView& b, int32_t* hist_start, cudaStream_t stream);
void LaunchMlaGather(const MlaGatherArgs& a, cudaStream_t stream);
// Grid of the decode kernel for a batch: row groups per sequence, and split-K (about one
// block per SM: a block holds ~170 KB of shared memory; splits of >= min_chunk keys of the
// longest sequence, max_kv_len; each sequence's chunk is MlaSplitChunk of its own length).
// min_chunk: kMlaMinChunk (one tile), or 64 (two tiles, the earlier default) with
// PEREGRINE_MLA_MIN_TILES=2 (A/B knob).
struct MlaDecodePlan {
  int row_groups, num_splits, min_chunk;
};
MlaDecodePlan PlanMlaDecode(int num_seqs, int max_q_len, int max_kv_len, int heads, int num_sms);
void LaunchMlaDecode(const MlaDecodeArgs& a, cudaStream_t stream);
// Register caps of the decode and merge + W_UV kernels (PEREGRINE_MLA_SLIM=1; off by default:
// measured slower): 168 x 256 + 88 x 256 (or + q-absorb's 64 x 256) fit one SM's 64K, so PDL
// could overlap each kernel's prologue with its predecessor (mla_decode.cu).
inline constexpr int kMlaDecodeRegs = 168, kMlaApplyRegs = 88;
bool MlaSlimRegisters();
void LaunchMlaCombine(const MlaCombineArgs& a, cudaStream_t stream);
void LaunchMlaKvPrep(const MlaKvPrepArgs& a, cudaStream_t stream);
// Return false (nothing launched) for shapes the kernels do not cover (the caller falls back
// to the separate kernels).
bool LaunchMlaQAbsorb(const MlaQAbsorbArgs& a, cudaStream_t stream);
bool LaunchMlaCombineApply(const MlaCombineApplyArgs& a, cudaStream_t stream);
// The q_pe part of MlaQAbsorbArgs alone (any token count): q_lat[:, :, rank:] = RoPE(q_pe)
// (rotated in place in q too) or a copy; one thread per (token, head, pair).
void LaunchMlaQPe(const MlaQAbsorbArgs& a, cudaStream_t stream);
void LaunchMlaGeneric(const MlaGenericArgs& a, cudaStream_t stream);
void LaunchMlaHeadGemm(const MlaHeadGemmArgs& a, cudaStream_t stream);
// Returns false when (nope, rope, v) has no compiled specialisation.
bool MlaPrefillSupports(int nope, int rope, int v);
void LaunchMlaPrefill(const MlaPrefillArgs& a, int nope, int rope, int v, cudaStream_t stream);

}  // namespace pg::cuda
