// The device paths' building blocks shared by the MoE architectures (qwen3_moe.cpp,
// deepseek_v3.cpp): where device weights come from (a MoeWeights store by Hugging Face name,
// or random), the dense SwiGLU MLP and the routed MoE block on the device, and the bytes of
// weights a step touched (the decode floor of `bench gpu-decode`). Built from ops only; bf16
// activations on fixed device buffers (graph-capturable: no host work depends on values).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/ops_moe.h"
#include "models/device_weights.h"
#include "models/moe_config.h"
#include "models/moe_weights.h"

namespace pg::models {

// Device weights by HF name: copied from `host` (null: random of the same shapes). Random
// mode makes every projection fp8 block-scaled when `random_fp8` (DeepSeek's fp8 checkpoints
// store all linear layers but embeddings, lm_head and routers so), bf16 otherwise.
class MoeDeviceSource {
 public:
  MoeDeviceSource(DeviceWeightMaker& mk, MoeWeights* host, bool random_fp8)
      : mk_(mk), host_(host), random_fp8_(random_fp8) {}
  DeviceWeightMaker& maker() { return mk_; }

  // A projection [rows, cols]: fp8 + block scales when stored so, else bf16.
  DeviceMatrix Linear(const std::string& name, int64_t rows, int64_t cols);
  // Always bf16 (fp8 dequantized); `row_scale` ([rows], optional) folded into the rows.
  TensorView Bf16(const std::string& name, int64_t rows, int64_t cols,
                  std::span<const float> row_scale = {});
  // bf16 [sum rows, cols]: the row concatenation of `names` (each [rows_i, cols]).
  TensorView Bf16Concat(const std::vector<std::string>& names, const std::vector<int64_t>& rows,
                        int64_t cols);
  // Whether `names` can be placed as one matrix by LinearConcat (random; or none stored fp8).
  bool CanConcat(const std::vector<std::string>& names);
  // The row concatenation of `names` as one projection [sum rows, cols]: random (fp8
  // block-scaled in random_fp8 mode), or bf16 from the host with `row_scale` folded.
  DeviceMatrix LinearConcat(const std::vector<std::string>& names,
                            const std::vector<int64_t>& rows, int64_t cols,
                            std::span<const float> row_scale = {});
  // f32 [n] (norm weights: random mean `mean`; biases: pass mean 0).
  TensorView Vector(const std::string& name, int64_t n, float mean);
  // Whether `name` would come back fp8 from Linear.
  bool IsFp8(const std::string& name);

 private:
  DeviceWeightMaker& mk_;
  MoeWeights* host_;
  bool random_fp8_;
};

// A SwiGLU MLP: out = down · (silu(gate · x) * (up · x)).
// bf16: gate and up are row ranges of one [2 * inter, hidden] matrix (gate_up), one GEMM;
// fp8: separate matrices (their 128-row scale blocks do not concatenate unless inter % 128 == 0).
struct DeviceMlp {
  int64_t inter = 0;
  TensorView gate_up;            // bf16 [2 * inter, hidden] (fused) or empty
  DeviceMatrix gate, up, down;   // gate/up [inter, hidden]; down [hidden, inter]
  int64_t bytes() const { return gate.bytes() + up.bytes() + down.bytes(); }
};

// The routed block of one layer. Expert weights of a layer sit in a few large allocations;
// `experts` are views into them (ops::MoeExpertsParams::experts).
struct DeviceMoeFfn {
  TensorView router;                            // [num_experts, hidden] bf16
  TensorView score_bias;                        // optional [num_experts] f32
  std::vector<DeviceMatrix> gate, up, down;     // [num_experts] each
  std::vector<ops::MoeExpertWeights> experts;   // [num_experts] views of the above
  int64_t expert_bytes = 0;                     // bytes of one expert (gate + up + down, scales)
  DeviceMlp shared;                             // shared experts (inter 0: none)
  TensorView topk_ids;                          // [capacity, top_k] i32, this layer's routes
  // Optional: the weights read right after this block (Qwen3-MoE: the next layer's fused qkv),
  // passed as MoeExpertsParams::l2_after (a hint; no effect on results).
  TensorView l2_after;
};

// Activations the feed-forward blocks share, carved once for `capacity` tokens.
struct DeviceFfnScratch {
  TensorView router_logits;  // [capacity, num_experts] f32
  TensorView topk_weights;   // [capacity, top_k] f32
  TensorView gate_up;        // [capacity, 2 * max inter] bf16
  TensorView act;            // [capacity, max inter] bf16
};

DeviceMlp PlaceMlp(MoeDeviceSource& src, const std::string& prefix, int64_t hidden,
                   int64_t inter);
DeviceMoeFfn PlaceMoeFfn(MoeDeviceSource& src, const std::string& prefix,
                         const MoeModelConfig& c, int64_t capacity);
DeviceFfnScratch PlaceFfnScratch(DeviceWeightMaker& mk, const MoeModelConfig& c,
                                 int64_t capacity);

// out[n, m] = x · w^T for a device matrix (bf16, or fp8 with its block scales).
void DeviceMatmul(const TensorView& x, const DeviceMatrix& w, const TensorView& out,
                  bool accumulate = false);
// The RMSNorm in front of a feed-forward block (ops::RmsNormParams): x (+ residual, updated
// in place).
struct FfnNorm {
  TensorView x, residual, weight;
  float eps = 1e-6f;
};
// x, out: [n, hidden] bf16 device; out must not alias x.
// accumulate: out += result (the residual stream as `out`).
// With `norm`, x is first computed as RmsNorm(*norm) into x (bf16 gate_up without a residual:
// inside the gate_up projection, FusedMatmul; the gate_up projection and SwiGLU are one kernel
// at GEMV sizes either way).
void RunDeviceMlp(const DeviceMlp& w, const TensorView& x, const TensorView& out,
                  const DeviceFfnScratch& s, bool accumulate = false,
                  const FfnNorm* norm = nullptr);
// Batches of at most this many tokens take the MoE decode path: the routing inside
// MoeExperts with the FFN's RMSNorm and router matmul (PEREGRINE_MOE_SELF_ROUTE,
// moe_device.cpp), the shared expert fused into
// MoeExperts, and (opt-in, PEREGRINE_MOE_FUSED_ROUTER=1; see moe_device.cpp) the router matmul
// and the FFN's RMSNorm fused into MoeRouter, where the backends take them. One token: at 2-4
// tokens both fusions measured slower on the H200 (the fused router's per-token loop; the
// walking kernels stream the shared expert once per token).
inline constexpr int64_t kMoeDecodeFuseMaxTokens = 1;
// With `norm`, x (the FFN input, [n, hidden]) is first computed as RmsNorm(*norm) into x.
// accumulate: out += result (the residual stream as `out`; must not alias x).
void RunDeviceMoeFfn(const DeviceMoeFfn& w, const MoeModelConfig& c, const TensorView& x,
                     const TensorView& out, const DeviceFfnScratch& s,
                     const FfnNorm* norm = nullptr, bool accumulate = false);

// Checks a device forward's inputs: positions and tokens agree, one KV view per layer, bf16
// device logits [logit_rows, vocab], device tokens/positions of the batch's size, at most
// `capacity` tokens, ids inside the vocabulary (checked here: a kernel under graph capture
// cannot report).
void CheckDeviceBatch(const ForwardBatch& fb, const KvCacheLayers& kv, const TensorView& logits,
                      const ModelConfig& c, const DeviceMemory& mem, int64_t capacity);

// Routed-expert bytes the last forward of `num_tokens` tokens read in this layer: distinct
// experts among its routes times the bytes of one expert. Reads the ids back (synchronises).
int64_t TouchedExpertBytes(const DeviceMoeFfn& w, int64_t num_tokens, int top_k,
                           DeviceMemory& mem);
// Distinct ids >= 0 among `ids` (host helper of the above; tested on the CPU).
int64_t CountDistinctExperts(std::span<const int32_t> ids, int num_experts);

// Weight bytes a device step streams: every placed byte but the input embedding (a gather),
// unless the output projection is tied to it.
inline int64_t StreamedDeviceBytes(int64_t placed_bytes, const TensorView& embed,
                                   const TensorView& output) {
  return placed_bytes - (output.data == embed.data ? 0 : embed.nbytes());
}

// Streamed bytes of the last device forward of `last_tokens` tokens: the routed experts of
// each MoE layer counted as those its routes touched, not all of them. `layers` are a
// model's device layers with `moe` (bool) and `moe_ffn` (DeviceMoeFfn).
template <class Layers>
int64_t LastForwardDeviceBytes(int64_t streamed, const Layers& layers, const MoeModelConfig& c,
                               int64_t last_tokens, DeviceMemory& mem) {
  if (last_tokens == 0) return streamed;
  int64_t bytes = streamed;
  for (const auto& L : layers) {
    if (!L.moe) continue;
    bytes -= L.moe_ffn.expert_bytes * c.num_experts;
    bytes += TouchedExpertBytes(L.moe_ffn, last_tokens, c.top_k, mem);
  }
  return bytes;
}

}  // namespace pg::models
