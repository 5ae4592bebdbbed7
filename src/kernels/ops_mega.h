// The persistent batch-1 decode kernel (issue 6; CUDA only, kernels/cuda/mega/): a chain of
// steps — a Llama layer's norm + qkv, RoPE + KV write + attention, o (+= into x), norm +
// gate_up + SwiGLU, down (+= into x), layer after layer — run by ONE cooperative kernel whose
// blocks stream the weights of the next steps while they wait for the previous one, so HBM
// does not idle at op boundaries.
//
// Each step is DEFINED as the ops_fused.h / ops.h op it replaces, at one token (n = 1, bf16):
//   kNormProject : FusedMatmul{x, norm_weight, eps, w, bias, out}
//   kAccumulate  : Matmul{x, w, out, accumulate = true}
//   kNormSwiGlu  : FusedMatmul{x, norm_weight, eps, w, swiglu = true, out}
//   kAttention   : RopeKvWrite{q, k, v of the qkv row x, rope} + Attention{q, out, scale}
//                  for one sequence's one new token (bf16 KV, scales 1, no window/softcap)
// The GEMV steps compute bitwise what the CUDA backends of those ops compute (same summation
// order and rounding points); the attention step rounds where they do (rotated q and k, the
// output) and differs by summation order only. tests/ops/mega_test.cpp checks both, and the
// reference composition.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "core/tensor.h"
#include "kernels/ops.h"

namespace pg::ops {

enum class MegaStepKind : uint8_t { kNormProject, kAccumulate, kNormSwiGlu, kAttention };

struct MegaStepParams {
  MegaStepKind kind = MegaStepKind::kNormProject;
  TensorView x;            // [1, k] bf16 (norm kinds: the norm's input)
  TensorView norm_weight;  // [k] f32/f16/bf16 (norm kinds)
  float eps = 1e-5f;
  TensorView w;            // [m, k] bf16, k % 8 == 0 ([2m, k] with swiglu: gate rows, then up)
  TensorView bias;         // optional [m] f32 (kNormProject only)
  TensorView out;          // [1, m] bf16; kAccumulate: updated in place; never aliases x
  // kNormSwiGlu, optional: [1, 2m] bf16 scratch of the gate and up projections; with it (and
  // the next step reading this step's out) the plan may run the warp mode (mega_warp.cu).
  TensorView projected;
  // kAttention: x = the layer's qkv row [1, (heads + 2 kv_heads) * head_dim] (q, k, v heads
  // of the new token, before RoPE; head_dim 128, heads / kv_heads <= 4), out = [1, heads *
  // head_dim]; `layer` indexes the caches given to Run.
  int layer = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;
  RopeConfig rope;
  float scale = 0.0f;  // softmax scale; 0 = 1 / sqrt(head_dim)
};

// What the attention steps of a launch read: the one-sequence, one-token batch (with its
// device copy, AttentionBatch::device) and every layer's cache.
struct MegaRunInputs {
  const AttentionBatch* batch = nullptr;
  std::span<const KvCacheView> caches;
};

// Whether attention steps can run on this batch and these caches (one sequence of one new
// token with a device batch view; bf16 caches with scales 1).
bool MegaAttentionFits(const MegaRunInputs& in);

// A device-resident program of steps (built once, e.g. at model placement: it allocates).
// Run launches steps [begin, end) as one kernel on the current stream; a step waits for the
// one before it inside the launch, and the launch for everything before it on the stream.
// Graph-capturable: the steps' pointers are fixed, the counters re-arm themselves.
class MegaPlan {
 public:
  virtual ~MegaPlan() = default;
  virtual int num_steps() const = 0;
  virtual void Run(int begin, int end, const MegaRunInputs& in = {}) const = 0;
  // With PEREGRINE_MEGA_TRACE=1 at creation: a timeline of the last Run (per step kind: the
  // barrier latency, input staging, tile time and spread over blocks); else empty.
  virtual std::string TraceReport() const = 0;
};

// nullptr (and *why_not set) when this build or device cannot run `steps` (no CUDA, a dtype,
// shape or alignment outside the kernel's range).
std::unique_ptr<MegaPlan> MakeMegaPlan(std::span<const MegaStepParams> steps,
                                       std::string* why_not = nullptr);

// MegaPlan::Run calls in this process (tests check that a model really took the mega path).
int64_t MegaLaunches();

// Each step through the ops it is defined as (any backend; scratch: normed [1, k] and
// projected [1, 2m] of the largest step, on the steps' device and dtype).
void RunMegaStepsComposed(std::span<const MegaStepParams> steps, TensorView normed,
                          TensorView projected);

}  // namespace pg::ops
