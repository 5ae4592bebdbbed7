// Fused decode ops (issue 6): a projection together with its neighbours, so that a small-batch
// decode step launches one kernel where the unfused ops launch two or three. Each op is
// DEFINED as the composition of ops.h ops and its reference runs exactly that composition of
// the reference kernels; a fusing backend rounds at the same points (bf16 on CUDA: the
// normalised rows and each projection output), so it differs from the composition only by
// summation order. Backends that cannot fuse a case run the composition through the ops.h
// dispatchers (the caller's scratch tensors hold the intermediates).
#pragma once

#include <string_view>

#include "core/tensor.h"
#include "kernels/ops.h"

namespace pg::ops {

// ---- RMSNorm -> Matmul -> SwiGLU --------------------------------------------------------
//   h   = norm_weight set ? RmsNorm(x, norm_weight, eps) : x               -> normed
//   y   = Matmul(h, w, bias, w_scale)                                      -> projected
//   out = swiglu ? SwiGlu(y) (gate y[:, :m/2], up y[:, m/2:]) : y      (accumulate: out += y)
// Llama's decode uses it for attn_norm + qkv projection, and for ffn_norm + gate_up + SwiGLU.
// CUDA fuses bf16 weights at n <= 4 (the GEMV range) into one kernel; larger batches and fp8
// weights run the composition (cuBLASLt).
struct FusedMatmulParams {
  TensorView x;            // [n, k] f32 (bf16 on CUDA)
  TensorView norm_weight;  // optional [k] f32/f16/bf16 (data == nullptr: no norm)
  float eps = 1e-5f;
  TensorView w;            // [m, k] as MatmulParams::w (m even with swiglu)
  TensorView bias;         // optional [m] f32
  TensorView w_scale;      // fp8 weights only, as MatmulParams::w_scale
  bool swiglu = false;
  TensorView out;          // [n, m], or [n, m / 2] with swiglu; must not alias x
  // Scratch of the composition (contents undefined afterwards): normed [n, k] when
  // norm_weight is set, projected [n, m] when swiglu is set; unused otherwise.
  TensorView normed, projected;
  bool accumulate = false;  // out += y (not with swiglu)
};
void FusedMatmul(const FusedMatmulParams& p);

void Validate(const FusedMatmulParams& p);
Device DeviceOf(const FusedMatmulParams& p);
std::string_view OpName(const FusedMatmulParams&);

// The composition through the ops.h dispatchers (each step on its fastest backend), or, with
// reference = true, through their reference kernels.
void RunFusedMatmulComposed(const FusedMatmulParams& p, bool reference);

}  // namespace pg::ops
