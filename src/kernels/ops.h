// The operator signatures of Peregrine. One params struct per op; every op has a CPU
// reference in ref/ (the ground truth in tests) and may have faster backends (cpu/, cuda/)
// chosen by the registry (registry.h) by capability, then priority.
//
// Conventions (all ops):
//  * Tensors are pg::TensorView; shapes are row-major, innermost dim last. Comments give
//    shapes as [dim0, dim1, ...]. Activations are f32 on CPU (bf16 on CUDA); weights may be
//    any dtype a backend declares it supports (f32, f16, bf16, GGUF block types, fp8).
//  * An op never allocates on the hot path; outputs are caller-provided.
//  * Dispatch functions below validate shapes/dtypes and throw pg::Error(kInvalidArgument)
//    with a message on mismatch, then call the selected implementation.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "core/tensor.h"

namespace pg::cuda {
struct DeviceBatchView;  // kernels/cuda/common/device_params.h
}  // namespace pg::cuda

namespace pg::ops {

// ---- embedding -------------------------------------------------------------------------
struct EmbeddingParams {
  TensorView table;   // [vocab, hidden], any dequantizable dtype
  TensorView ids;     // [num_tokens] i32, each in [0, vocab)
  TensorView out;     // [num_tokens, hidden] f32
};
void Embedding(const EmbeddingParams& p);

// ---- normalisation -----------------------------------------------------------------------
// out = x / sqrt(mean(x^2) + eps) * weight  (row-wise over the last dim)
// If `residual` is set: residual += x first, and the norm is taken of the new residual
// (fused residual-add + RMSNorm); x is then only read.
struct RmsNormParams {
  TensorView x;         // [rows, hidden] f32
  TensorView weight;    // [hidden] f32 (or f16/bf16)
  TensorView out;       // [rows, hidden] f32; may alias x when residual is unset
  TensorView residual;  // optional [rows, hidden] f32, updated in place (data == nullptr: unset)
  float eps = 1e-5f;
};
void RmsNorm(const RmsNormParams& p);

// ---- rotary position embedding ---------------------------------------------------------
enum class RopeScaling : uint8_t { kNone, kLlama3, kYarn, kLinear };
struct RopeConfig {
  float theta = 10000.0f;
  int rotary_dim = 0;          // dims rotated per head (<= head_dim, even); 0 = head_dim
  bool neox = true;            // true: pairs (i, i + rotary_dim/2) (HF "rotate_half");
                               // false: pairs (2i, 2i+1) (GPT-J / interleaved)
  RopeScaling scaling = RopeScaling::kNone;
  float factor = 1.0f;                   // llama3 / yarn / linear
  float low_freq_factor = 1.0f;          // llama3
  float high_freq_factor = 4.0f;         // llama3
  int original_max_position = 8192;      // llama3 / yarn
  float beta_fast = 32.0f, beta_slow = 1.0f;  // yarn
  float mscale = 1.0f, mscale_all_dim = 0.0f; // yarn (DeepSeek); attention scaling factor
};
// Rotates x in place. x: [num_tokens, num_heads, head_dim] f32; positions: [num_tokens] i32.
struct RopeParams {
  TensorView x;
  TensorView positions;
  RopeConfig config;
};
void Rope(const RopeParams& p);
// YaRN's magnitude correction to apply to attention logits' scale (1.0 when not yarn).
float RopeAttentionScale(const RopeConfig& c);

// ---- matmul (linear layer) ------------------------------------------------------------
// out[n, m] = x[n, k] · w[m, k]^T (+ bias[m]).  w may be quantized (GGUF blocks along k).
// If accumulate: out += result.
struct MatmulParams {
  TensorView x;     // [n, k] f32
  TensorView w;     // [m, k] weight, row-major by output feature
  TensorView out;   // [n, m] f32
  TensorView bias;  // optional [m] f32
  // fp8 e4m3 weights only (w.dtype == kF8E4M3): f32 dequantization scales, real weight =
  // float(w) * scale, by the shape of w_scale:
  //   [1]                                   per tensor
  //   [m]                                   per output channel
  //   [ceil(m / 128), ceil(k / 128)]        DeepSeek 128x128 blocks (weight_scale_inv)
  TensorView w_scale;
  bool accumulate = false;
};
void Matmul(const MatmulParams& p);
// A copy of host weight matrix w in a layout this CPU's fastest Matmul kernel streams better
// (Q4_0 / Q4_1 with 4 rows interleaved, on AVX2 or newer CPUs), or nullopt where none applies,
// where SetMaxKernelPriority keeps that kernel from running, or with PEREGRINE_CPU_REPACK=0.
// Matmul on the copy gives w's bits; only the CPU Matmul's int8 kernels (cpu_vnni_q8,
// cpu_avx2_q8) read it.
std::optional<Tensor> PackMatmulWeightForCpu(const TensorView& w);

// ---- activation ------------------------------------------------------------------------
// out[r, i] = silu(gate_up[r, i]) * gate_up[r, i + inter]   (gate and up concatenated)
// or, when `up` is set: out = silu(gate) * up.
struct SwiGluParams {
  TensorView gate;  // [rows, inter] f32, or [rows, 2*inter] when up is unset
  TensorView up;    // optional [rows, inter] f32
  TensorView out;   // [rows, inter] f32
};
void SwiGlu(const SwiGluParams& p);

// out = a + b (elementwise, same shape, f32). out may alias a or b.
struct AddParams { TensorView a, b, out; };
void Add(const AddParams& p);

// ---- paged KV cache ----------------------------------------------------------------------
// A layer's cache is num_pages pages; page p holds page_size token slots:
//   k_cache: [num_pages, page_size, num_kv_heads, head_dim]   (same for v_cache)
// A sequence's token t lives in page page_table[t / page_size], slot t % page_size.
// dtype f32/f16/bf16 (CPU), bf16 or fp8 e4m3 (CUDA; the reference takes every one of them).
// Every dtype stores value / scale (k_scale for k_cache, v_scale for v_cache; per tensor, so
// one layer's whole cache shares them): KvWrite divides, Attention multiplies back. For fp8
// e4m3 (DType::kF8E4M3, one byte per element, same [pages, page_size, kv_heads, head_dim]
// layout, no padding) the division rounds to nearest-even and saturates to +-448 (NaN stays
// NaN), as core/dtype.h F32ToF8E4M3; a reader dequantizes with float(e4m3) * scale. bf16
// caches use scale 1 (the default).
struct KvCacheView {
  TensorView k_cache;
  TensorView v_cache;
  float k_scale = 1.0f, v_scale = 1.0f;
};

// Batch metadata shared by every layer ("plan once per batch, run per layer").
// Sequence s owns query rows [q_start[s], q_start[s] + q_len[s]) of the batch; its new tokens
// are at positions [kv_len[s] - q_len[s], kv_len[s]) of the sequence (the first
// kv_len - q_len positions are a cached prefix). Its pages are
// page_table[page_start[s] ... page_start[s] + ceil(kv_len/page_size)).
struct AttentionBatch {
  int num_seqs = 0;
  int page_size = 0;
  std::span<const int32_t> q_start;     // [num_seqs]
  std::span<const int32_t> q_len;       // [num_seqs]
  std::span<const int32_t> kv_len;      // [num_seqs]
  std::span<const int32_t> page_start;  // [num_seqs] offsets into page_table
  std::span<const int32_t> page_table;  // flattened page indices
  // Optional (CUDA backends): this same batch already on the device, uploaded once per batch
  // by pg::cuda::DeviceBatchPlan (kernels/cuda/batch_plan.h) and read by every layer (and by
  // CUDA graphs). Null: a CUDA kernel uploads the spans itself (tests; not graph-capturable).
  const cuda::DeviceBatchView* device = nullptr;
  int num_tokens() const;               // sum of q_len
};

// Writes the new tokens' k, v into their slots. k, v: [num_tokens, num_kv_heads, head_dim].
struct KvWriteParams {
  TensorView k, v;
  KvCacheView cache;
  const AttentionBatch* batch = nullptr;
};
void KvWrite(const KvWriteParams& p);

// Fused RoPE + KV write (decode and prefill): rotates q and k in place with `config` (as
// Rope on each), then writes the rotated k and v into their slots (as KvWrite). Exactly
// Rope(q); Rope(k); KvWrite(k, v) on every backend (the CUDA kernel rounds the rotated k to
// bf16 before converting it for the cache, as the separate ops would).
//   q: [num_tokens, num_heads, head_dim]; k, v: [num_tokens, num_kv_heads, head_dim]
struct RopeKvWriteParams {
  TensorView q, k, v;
  TensorView positions;  // [num_tokens] i32
  RopeConfig config;
  KvCacheView cache;
  const AttentionBatch* batch = nullptr;
  // Optional (both or neither): per-head RMSNorm of q and k over head_dim before the rotation
  // (Qwen3 q_norm / k_norm), i.e. RmsNorm(q heads); RmsNorm(k heads); then the above.
  TensorView q_norm, k_norm;  // [head_dim] f32 (or f16/bf16)
  float norm_eps = 1e-6f;
};
void RopeKvWrite(const RopeKvWriteParams& p);

// Causal attention of each sequence's new queries over its whole history (cached prefix
// and the new tokens, already written by KvWrite). Grouped-query: query head h reads kv
// head h / (num_heads / num_kv_heads).
//   q:   [num_tokens, num_heads, head_dim] f32
//   out: [num_tokens, num_heads, head_dim] f32
struct AttentionParams {
  TensorView q;
  TensorView out;
  KvCacheView cache;
  const AttentionBatch* batch = nullptr;
  float scale = 0.0f;          // softmax scale; 0 = 1/sqrt(head_dim)
  int sliding_window = 0;      // 0 = none; else attend to the last `sliding_window` positions
  float logit_softcap = 0.0f;  // 0 = none
};
void Attention(const AttentionParams& p);

}  // namespace pg::ops
