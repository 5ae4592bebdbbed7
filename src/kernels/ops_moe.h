// Mixture-of-experts and Multi-head Latent Attention ops (issue 7). Same conventions as
// ops.h: one params struct per op, f32 activations on the CPU, a CPU reference for every op
// (ref/moe_*.cpp), faster backends chosen by the registry (cpu/moe_*.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/tensor.h"
#include "kernels/ops.h"

namespace pg::ops {

// ---- MoE router ------------------------------------------------------------------------
// Per token: scores = softmax(logits) or sigmoid(logits) (f32); experts are chosen on
// scores + bias (bias only steers the choice, as DeepSeek-V3's e_score_correction_bias):
// experts are split into num_groups equal groups, a group's score is the sum of its best two
// choice scores (its best one when a group has one expert), only the topk_groups best groups
// stay eligible, and the top_k eligible experts are chosen. Their weights are the unbiased
// scores, divided by their sum when renormalize, then multiplied by scaling.
//   Qwen3-MoE: softmax, 1 group, renormalize = norm_topk_prob, scaling 1.
//   DeepSeek-V3 / Kimi K2: sigmoid, bias, n_group / topk_group, routed_scaling_factor.
// Ties choose the lower expert index. Experts of a token are listed in descending choice
// score.
// CUDA: logits bf16 or f32 on the device (bias, topk_weights f32, topk_ids i32, all on the
// device); up to 1024 experts, top_k <= 32, num_groups <= 32.
// Fused router matmul (optional): with x and router given, logits = x · router^T is computed
// first (f32, written to `logits`, which must then be f32) and routed; CUDA runs both in one
// kernel (x, router bf16), meant for decode-sized batches. With norm_weight too, an RMSNorm
// runs first, exactly as RmsNorm({.x = x, .weight = norm_weight, .out = normed,
// .residual = residual, .eps = norm_eps}), and the logits are computed from `normed` (the
// experts' input). CUDA: norm_weight f32, normed / residual bf16.
enum class MoeScoring : uint8_t { kSoftmax, kSigmoid };
struct MoeRouterParams {
  TensorView logits;        // [num_tokens, num_experts] f32 (router matmul output; bf16 ok on CUDA)
  TensorView bias;          // optional [num_experts] f32 (data == nullptr: none)
  TensorView topk_ids;      // [num_tokens, top_k] i32, out
  TensorView topk_weights;  // [num_tokens, top_k] f32, out
  MoeScoring scoring = MoeScoring::kSoftmax;
  int num_groups = 1;       // divides num_experts
  int topk_groups = 1;      // in [1, num_groups]; top_k <= topk_groups * experts per group
  bool renormalize = true;
  float scaling = 1.0f;
  TensorView x;             // optional [num_tokens, hidden] (fused router matmul, see above)
  TensorView router;        // with x: [num_experts, hidden]
  TensorView norm_weight;   // optional, with x: [hidden] (fused RMSNorm, see above)
  TensorView normed;        // with norm_weight: [num_tokens, hidden], out
  TensorView residual;      // optional, with norm_weight: [num_tokens, hidden], updated in place
  float norm_eps = 1e-6f;
};
void MoeRouter(const MoeRouterParams& p);

// ---- MoE experts (SwiGLU) ----------------------------------------------------------------
// out[t] (+)= sum_j topk_weights[t, j] * expert_{ids[t, j]}(x[t]), where
// expert_e(x) = down_e · (silu(gate_e · x) * (up_e · x)). Weights are per expert, any
// dequantizable dtype (each expert's matrices are separate views: hub checkpoints store one
// tensor per expert). An id of -1 is an empty route (contributes nothing).
// fp8 e4m3 weights carry f32 dequantization scales (real = float(w) * scale) shaped as
// MatmulParams::w_scale: [1] per tensor, [rows] per output channel, or DeepSeek's 128x128
// blocks [ceil(rows / 128), ceil(cols / 128)] (weight_scale_inv). Other dtypes: no scales.
// CUDA: x / out bf16, weights bf16 or fp8 e4m3 (+ scales), ids / topk_weights on the device.
struct MoeExpertWeights {
  TensorView gate;  // [inter, hidden]
  TensorView up;    // [inter, hidden]
  TensorView down;  // [hidden, inter]
  TensorView gate_scale, up_scale, down_scale;  // fp8 only (see above)
};
struct MoeExpertsParams {
  TensorView x;                               // [num_tokens, hidden] f32 (bf16 on CUDA)
  TensorView topk_ids;                        // [num_tokens, top_k] i32, in [-1, num_experts)
  TensorView topk_weights;                    // [num_tokens, top_k] f32
  std::span<const MoeExpertWeights> experts;  // [num_experts], one inter size for all
  TensorView out;                             // [num_tokens, hidden] f32 (bf16 on CUDA); must not alias x
  bool accumulate = false;                    // out += result (e.g. onto the shared expert)
  // Optional shared expert (shared.gate.data != null), weight 1 for every token:
  // out (+)= shared(x) + routed sum. Its inter is a multiple of the routed experts' (DeepSeek:
  // n_shared_experts * moe_intermediate_size); same dtype and scale kind as theirs. CUDA runs
  // it inside the route-walking kernels (extra slots per token).
  MoeExpertWeights shared;
  // Optional: this call's routing, run first as part of the op — exactly MoeRouter(*route),
  // whose topk_ids / topk_weights must be this op's (then outputs of the op) and, with a fused
  // router matmul, whose input is this op's x (route->normed with a fused RMSNorm, else
  // route->x). CUDA at walking batch sizes (<= 256 experts, no residual): the router kernel
  // only computes the logits (and the normed rows), and every gate/up block of the experts
  // routes its token itself (one kernel less); otherwise MoeRouter's kernel runs first.
  const MoeRouterParams* route = nullptr;
  // A hint with no effect on any result: the weights the caller reads next (the next layer's
  // qkv projection), which a backend may ask its cache for as its own reads end (CUDA: the
  // one-token down kernel's blocks, at cuda::MoeTuning::walk_l2_after_pct of the bytes; with
  // the routing inside, also its NormLogits kernel at walk_router_l2_pct, default off).
  // Contiguous, on the op's device; empty: none.
  TensorView l2_after;
};
void MoeExperts(const MoeExpertsParams& p);

// ---- Multi-head Latent Attention ------------------------------------------------------
// The latent KV cache holds, per token, one row of L = kv_lora_rank + rope_dim values:
// the kv_a_layernorm-ed latent c_kv, then the rotated shared rope key k_pe. The runtime's
// paged cache has K and V halves of equal shape ([pages, page_size, 1, MlaCacheHalfDim]);
// the latent row is stored split over them: elements [0, half) in k_cache, [half, L) in
// v_cache (padding at the end of v when L is odd). So a latent cache costs L values per
// token and layer, no more.
inline int64_t MlaCacheHalfDim(int64_t kv_lora_rank, int64_t rope_dim) {
  return (kv_lora_rank + rope_dim + 1) / 2;
}

// Writes the new tokens' latent rows into their slots (positions as KvWrite).
// Optional fused prologue (the decode path's kv_a_layernorm and k_pe RoPE; kv_lora_rank > 0):
// with norm_weight set, latent[:, :kv_lora_rank] is RMS-normed in place (as RmsNorm with
// norm_weight [kv_lora_rank], eps); with positions set, latent[:, kv_lora_rank:] is rotated in
// place as one RoPE head of rope_dim values (as Rope with `rope`, rotary_dim 0 or rope_dim).
// Exactly RmsNorm; Rope; MlaCacheWrite on every backend, the rounding of each included.
struct MlaCacheWriteParams {
  TensorView latent;  // [num_tokens, kv_lora_rank + rope_dim] f32
  KvCacheView cache;  // latent cache (layout above), f32/f16/bf16
  const AttentionBatch* batch = nullptr;
  TensorView norm_weight;  // optional [kv_lora_rank] f32 (or f16/bf16)
  float eps = 1e-6f;
  int kv_lora_rank = 0;    // needed with norm_weight or positions
  TensorView positions;    // optional [num_tokens] i32
  RopeConfig rope;
};
void MlaCacheWrite(const MlaCacheWriteParams& p);

// Causal attention of each sequence's new queries over its latent history, with per-head
// keys k_h(t) = [W_UK_h · c_kv(t), k_pe(t)] and values v_h(t) = W_UV_h · c_kv(t), where
// w_kv_b (kv_b_proj) stacks, per head h, W_UK_h (nope_dim rows) then W_UV_h (v_dim rows).
//   kExpanded: materialises k_h, v_h for the history (prefill style).
//   kAbsorbed: folds W_UK into the query (q_abs = W_UK_h^T q_nope), attends over the latents
//              directly, and applies W_UV after attention (decode style).
// Both compute the same function (up to rounding); tests check absorbed == expanded.
enum class MlaMode : uint8_t { kExpanded, kAbsorbed };
struct MlaAttentionParams {
  TensorView q;       // [num_tokens, num_heads, nope_dim + rope_dim] f32, rope part rotated
  TensorView w_kv_b;  // [num_heads * (nope_dim + v_dim), kv_lora_rank], dequantizable
  // Or (w_kv_b then unset) the split form llama.cpp's deepseek2 files store, both contiguous
  // and dequantizable by rows (a Q8_0 file's blocks run along nope_dim in w_k_b and along
  // kv_lora_rank in w_v_b): per head h, w_k_b[h] = W_UK_h^T and w_v_b[h] = W_UV_h.
  TensorView w_k_b;   // [num_heads, kv_lora_rank, nope_dim]
  TensorView w_v_b;   // [num_heads, v_dim, kv_lora_rank]
  TensorView out;     // [num_tokens, num_heads, v_dim] f32
  KvCacheView cache;  // latent cache (layout above), written by MlaCacheWrite
  const AttentionBatch* batch = nullptr;
  int kv_lora_rank = 0;
  int rope_dim = 0;   // nope_dim = q.dim(2) - rope_dim; v_dim = out.dim(2)
  float scale = 0.0f; // softmax scale; 0 = 1/sqrt(nope_dim + rope_dim)
  MlaMode mode = MlaMode::kExpanded;
  // Optional fused q RoPE: with positions set, q[:, :, nope_dim:] is first rotated in place
  // (as Rope on that [num_tokens, num_heads, rope_dim] view with `rope`, rotary_dim 0 or
  // rope_dim); q then holds the rotated values, as after a separate Rope.
  TensorView positions;  // optional [num_tokens] i32
  RopeConfig rope;
  // Optional: the new tokens' cache write (MlaCacheWrite, with its prologue; same batch and
  // cache) runs first, as part of this op (CUDA at <= 4 tokens: inside the q-side kernel).
  const MlaCacheWriteParams* write = nullptr;
};
void MlaAttention(const MlaAttentionParams& p);

// ---- registry hooks (registry.h) --------------------------------------------------------
// Validate throws pg::Error(kInvalidArgument) naming the op and the offending shapes.
void Validate(const MoeRouterParams& p);
void Validate(const MoeExpertsParams& p);
void Validate(const MlaCacheWriteParams& p);
void Validate(const MlaAttentionParams& p);
Device DeviceOf(const MoeRouterParams& p);
Device DeviceOf(const MoeExpertsParams& p);
Device DeviceOf(const MlaCacheWriteParams& p);
Device DeviceOf(const MlaAttentionParams& p);
std::string_view OpName(const MoeRouterParams&);
std::string_view OpName(const MoeExpertsParams&);
std::string_view OpName(const MlaCacheWriteParams&);
std::string_view OpName(const MlaAttentionParams&);

}  // namespace pg::ops
