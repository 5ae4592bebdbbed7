// The kernels of ops_moe.h, by backend. Internal to src/kernels: callers use the dispatch
// functions of ops_moe.h; tests reach a backend through Registry::Global().table<P>().
#pragma once

#include "kernels/ops_moe.h"
#include "kernels/registry.h"

namespace pg::ops {

namespace ref {
// Reference backend (moe_ref.cpp, moe_mla_ref.cpp): plain loops, double accumulation.
void MoeRouter(const MoeRouterParams& p);
void MoeExperts(const MoeExpertsParams& p);
void MlaCacheWrite(const MlaCacheWriteParams& p);
void MlaAttention(const MlaAttentionParams& p);
// Head h of MlaAttention's weight as f32 rows [nope + v_dim, kv_lora_rank] (W_UK_h, then
// W_UV_h) in `out`, from either form (ops_moe.h): rows of w_kv_b, or w_k_b[h] transposed and
// w_v_b[h]. Exactly the dequantized values (shared by the CPU backend).
void MlaHeadWeightF32(const MlaAttentionParams& p, int64_t h, float* out);
}  // namespace ref

namespace cpu {
// CPU backend of the MoE ops (cpu/moe_experts.cpp, cpu/mla_attention.cpp): register their
// kernels.
void RegisterMoe(Registry& r);
void RegisterMla(Registry& r);
}  // namespace cpu

}  // namespace pg::ops
