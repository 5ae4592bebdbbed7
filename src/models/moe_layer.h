// The feed-forward blocks the MoE architectures share: a dense SwiGLU MLP and a routed MoE
// block (router matmul -> ops::MoeRouter -> ops::MoeExperts, plus DeepSeek's shared experts).
// Built from ops only.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/ops_moe.h"
#include "models/cpu_pack.h"
#include "models/moe_config.h"
#include "models/moe_weights.h"

namespace pg::models {

struct MlpWeights {
  TensorView gate, up;  // [inter, hidden]
  TensorView down;      // [hidden, inter]
  int64_t inter() const { return gate.data ? gate.dim(0) : 0; }
};

struct MoeFfnWeights {
  TensorView router;                        // [num_experts, hidden]
  TensorView score_bias;                    // optional [num_experts] f32
  std::vector<ops::MoeExpertWeights> experts;
  MlpWeights shared;                        // optional (DeepSeek n_shared_experts > 0)
};

// HF names under `prefix` ("model.layers.3.mlp."): gate_proj/up_proj/down_proj.
MlpWeights LoadMlp(MoeWeights& w, const std::string& prefix, int64_t hidden, int64_t inter);
// gate.weight, gate.e_score_correction_bias, experts.<e>.*, shared_experts.*
MoeFfnWeights LoadMoeFfn(MoeWeights& w, const std::string& prefix, const MoeModelConfig& c);

// Registers the block's matrices (not the router) with `packer` (cpu_pack.h).
void AddForCpuPacking(MlpWeights& w, CpuPackedWeights& packer);
void AddForCpuPacking(MoeFfnWeights& w, CpuPackedWeights& packer);

// Grow-only activations of the feed-forward blocks; views are re-sliced per batch.
class FfnScratch {
 public:
  // [n, cols] f32 view of buffer `slot` (grown to at least n * cols values).
  TensorView F32(int slot, int64_t n, int64_t cols);
  TensorView I32(int64_t n, int64_t cols);

 private:
  std::vector<float> f_[4];
  std::vector<int32_t> i_;
};

// out = down · (silu(gate · x) * (up · x)). x, out: [n, hidden] f32; out must not alias x.
void RunMlp(const MlpWeights& w, const TensorView& x, const TensorView& out, FfnScratch& s);
// out = shared(x) + sum over routed experts (ops_moe.h). x, out: [n, hidden] f32.
// last_row_margin (optional): RoutingMargin of the batch's last row.
void RunMoeFfn(const MoeFfnWeights& w, const MoeModelConfig& c, const TensorView& x,
               const TensorView& out, FfnScratch& s, float* last_row_margin = nullptr);

// The rest of a host (f32) decoder layer after its attention, as both MoE models run it:
// o = attn · woᵀ; hn = RmsNorm(o + x) with x updated to o + x (the residual stream); ffn = the
// layer's feed-forward block of hn (the routed MoE block with `moe`, else the dense `mlp`).
// Returns the batch's last-row routing margin (+inf for a dense layer).
struct HostLayerTail {
  TensorView attn, wo, o;        // [n, heads * v_dim], [hidden, heads * v_dim], [n, hidden]
  TensorView x, hn, ffn;         // [n, hidden] each
  TensorView ffn_norm;           // [hidden]
  float eps = 1e-6f;
  const MoeFfnWeights* moe = nullptr;
  const MlpWeights* mlp = nullptr;  // used when moe is null
};
float RunHostLayerTail(const HostLayerTail& t, const MoeModelConfig& c, FfnScratch& s);

// How close one token's expert choice is to a tie, from its router logits [num_experts]
// (ops_moe.h's choice scores: softmax or sigmoid, plus the bias): the smaller of the gap
// between the topk_groups-th and the next group score and the gap between the top_k-th and
// the next eligible choice score; +inf when nothing competes. A perturbation of the scores
// smaller than half of it cannot change the chosen experts (tests: tell a device path's
// expert flips at such near-ties from errors).
float RoutingMargin(std::span<const float> logits, const MoeFfnWeights& w, const MoeModelConfig& c);

}  // namespace pg::models
