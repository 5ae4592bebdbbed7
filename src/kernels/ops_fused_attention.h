// Fused decode attention (issues 6 + 7): RopeKvWrite followed by Attention as ONE op, so that a
// small-batch decode step runs the new token's (q/k norm,) RoPE, its KV-cache write and the
// attention over the whole history in one kernel. DEFINED as the composition
//   RopeKvWrite({q, k, v, positions, config, cache, batch, q_norm, k_norm, norm_eps});
//   Attention({q (rotated), out, cache, batch, scale, sliding_window, logit_softcap});
// and its reference runs exactly that composition of the reference kernels. A fusing backend
// rounds at the same points as the CUDA composition (the normalised and rotated q / k to bf16,
// k and v to the cache type), so it differs from it only by summation order. Backends that
// cannot fuse a batch run the composition through the ops.h dispatchers.
#pragma once

#include <string_view>

#include "core/tensor.h"
#include "kernels/ops.h"

namespace pg::ops {

// q, k: scratch after the op (the composition rotates them in place, the fused CUDA kernel
// leaves them as they were); read them again only through the cache. out must not alias q.
//   rope.q: [num_tokens, num_heads, head_dim]; rope.k, rope.v: [num_tokens, num_kv_heads,
//   head_dim]; out: [num_tokens, num_heads, head_dim].
struct RopeKvWriteAttentionParams {
  RopeKvWriteParams rope;      // q, k, v, positions, config, cache, batch, q/k norm
  TensorView out;
  float scale = 0.0f;          // AttentionParams::scale (0 = 1/sqrt(head_dim))
  int sliding_window = 0;      // AttentionParams::sliding_window
  float logit_softcap = 0.0f;  // AttentionParams::logit_softcap
  // A hint with no effect on any result: the weights the caller's next op reads (the o
  // projection's), which a backend may ask its cache for while its own reads drain (CUDA:
  // the long-context streaming kernel, cuda::SetDecodeStreamL2AfterPct). Contiguous, on the
  // op's device; empty: none.
  TensorView l2_after;
};
void RopeKvWriteAttention(const RopeKvWriteAttentionParams& p);

// Whether the models' device paths call RopeKvWriteAttention instead of RopeKvWrite +
// Attention: PEREGRINE_FUSED_ATTN (core/env.h EnvFlag, default on: measured faster on the
// H200, docs/PERF.md "Single-kernel decode attention"; read per call).
bool FusedAttentionEnabled();

void Validate(const RopeKvWriteAttentionParams& p);
Device DeviceOf(const RopeKvWriteAttentionParams& p);
std::string_view OpName(const RopeKvWriteAttentionParams&);

// The Attention step of the composition (q = p.rope.q).
AttentionParams AttentionStepOf(const RopeKvWriteAttentionParams& p);
// The composition through the ops.h dispatchers (each step on its fastest backend), or, with
// reference = true, through their reference kernels.
void RunRopeKvWriteAttentionComposed(const RopeKvWriteAttentionParams& p, bool reference);

}  // namespace pg::ops
