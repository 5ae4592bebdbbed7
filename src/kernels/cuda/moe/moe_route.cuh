// Routing of one token by one warp (ops_moe.h MoeRouterParams semantics; args as
// moe_params.h MoeRouterArgs), shared by the router kernels (moe_router.cu) and the walking
// gate/up kernel that routes for itself (moe_walk.cu). Scores, choice scores and the top-k
// selection stay in registers (expert e = lane + 32 j in slot j of its lane; up to
// 32 * kRoutePerLane experts); only group-limited routing passes the choice scores through
// shared memory. Selection per round: the lane's best (value descending, index ascending),
// then the warp's by one __reduce_max_sync on an order-preserving key of the value and one
// __reduce_min_sync on the index among the lanes holding that value — the reference's order
// (ties: lower index), exactly.
#pragma once

#include <cfloat>

#include "kernels/cuda/common/block_trace.cuh"
#include "kernels/cuda/moe/moe_device.cuh"
#include "kernels/cuda/moe/moe_params.h"

namespace pg::cuda::moe {

inline constexpr int kRoutePerLane = kRouteRegMaxExperts / 32;  // experts per lane

// Order-preserving unsigned key of a float (no NaNs): a < b  <=>  Key(a) < Key(b) (-0 < +0).
__device__ __forceinline__ unsigned OrderKey(float f) {
  const unsigned u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Group-limited eligibility (num_groups > 1, topk_groups < num_groups): choice[] ([E] shared
// memory, the token's choice scores) loses the experts of all but the topk_groups best groups
// (a group's score: the sum of its best two choice scores, its best one when it has one
// expert; ties: lower group). Whole warp.
__device__ inline void MaskGroups(const MoeRouterArgs& a, float* choice, int lane) {
  const int E = a.num_experts;
  const int per = E / a.num_groups;
  float gscore = -FLT_MAX;
  if (lane < a.num_groups) {
    float b1 = -FLT_MAX, b2 = -FLT_MAX;
    for (int e = lane * per; e < (lane + 1) * per; ++e) {
      const float c = choice[e];
      if (c > b1) b2 = b1, b1 = c;
      else if (c > b2) b2 = c;
    }
    gscore = per > 1 ? b1 + b2 : b1;
  }
  unsigned keep = 0;
  for (int s = 0; s < a.topk_groups; ++s) {
    // Best group not yet kept (value descending, index ascending).
    const float v = lane < a.num_groups && !((keep >> lane) & 1u) ? gscore : -INFINITY;
    const unsigned best = __reduce_max_sync(0xffffffffu, OrderKey(v));
    const unsigned g = __reduce_min_sync(
        0xffffffffu, OrderKey(v) == best && lane < a.num_groups ? unsigned(lane) : 0xffffffffu);
    keep |= 1u << g;
  }
  __syncwarp();
  for (int e = lane; e < E; e += 32)
    if (!((keep >> (e / per)) & 1u)) choice[e] = -FLT_MAX;
  __syncwarp();
}

// Routes one token from its logits in registers, lg[j] = logit of expert lane + 32 j (entries
// past num_experts ignored); whole warp, a.num_experts <= 32 * kRoutePerLane. Lane j < top_k
// gets the j-th chosen expert (descending choice score) in *id and its final weight
// (renormalised, scaled) in *weight; other lanes get -1 / 0. choice_smem: [num_experts] f32 of
// shared memory (used only by group-limited routing).
__device__ inline void RouteWarpLogits(const MoeRouterArgs& a, const float (&lg)[kRoutePerLane],
                                       float* choice_smem, int lane, int* id, float* weight) {
  constexpr int P = kRoutePerLane;
  const int E = a.num_experts;
  float s[P], c[P];
  float mx = -FLT_MAX;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    s[j] = lg[j];
    if (lane + 32 * j < E) mx = fmaxf(mx, s[j]);
  }
  if (a.sigmoid) {
#pragma unroll
    for (int j = 0; j < P; ++j)
      if (lane + 32 * j < E) s[j] = 1.0f / (1.0f + expf(-s[j]));
  } else {
    mx = WarpMax(mx);
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < P; ++j)
      if (lane + 32 * j < E) sum += (s[j] = expf(s[j] - mx));
    const float inv = 1.0f / WarpSum(sum);
#pragma unroll
    for (int j = 0; j < P; ++j) s[j] *= inv;
  }
  PG_TRACE_MARK(0);  // scores (the logits arrived)
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int e = lane + 32 * j;
    c[j] = e < E ? s[j] + (a.bias ? a.bias[e] : 0.0f) : -INFINITY;
  }
  if (a.num_groups > 1 && a.topk_groups < a.num_groups) {
#pragma unroll
    for (int j = 0; j < P; ++j)
      if (lane + 32 * j < E) choice_smem[lane + 32 * j] = c[j];
    __syncwarp();
    MaskGroups(a, choice_smem, lane);
#pragma unroll
    for (int j = 0; j < P; ++j)
      if (lane + 32 * j < E) c[j] = choice_smem[lane + 32 * j];
    __syncwarp();  // choice_smem is reused by the warp's next token
  }
  // Top-k: a chosen expert's choice becomes -inf (below every eligible score, which is
  // finite; ineligible ones are -FLT_MAX, still above it).
  int my_id = -1;
  float my_score = 0.0f, sum = 0.0f;
  for (int k = 0; k < a.top_k; ++k) {
    float bv = c[0];
    int bj = 0;
#pragma unroll
    for (int j = 1; j < P; ++j)
      if (c[j] > bv) bv = c[j], bj = j;  // strict: the lower index (smaller j) wins ties
    const unsigned key = OrderKey(bv);
    const unsigned best = __reduce_max_sync(0xffffffffu, key);
    const unsigned e = __reduce_min_sync(0xffffffffu, key == best ? unsigned(lane + 32 * bj) : 0xffffffffu);
    const int owner = int(e & 31u), oj = int(e >> 5);
    float se = 0.0f;
#pragma unroll
    for (int j = 0; j < P; ++j)
      if (j == oj) se = s[j];
    se = __shfl_sync(0xffffffffu, se, owner);
    if (lane == owner) {
#pragma unroll
      for (int j = 0; j < P; ++j)
        if (j == oj) c[j] = -INFINITY;
    }
    sum += se;
    if (lane == k) my_id = int(e), my_score = se;
  }
  PG_TRACE_MARK(1);  // top-k chosen
  float w = 0.0f;
  if (lane < a.top_k) {
    w = my_score;
    if (a.renormalize) w /= sum + 1e-20f;
    w *= a.scaling;
  }
  *id = my_id;
  *weight = w;
}

// The same for token t of a.logits; f32 logits are read through L2 (__ldcg): they may come
// from other blocks of the same grid.
__device__ inline void RouteWarp(const MoeRouterArgs& a, int64_t t, float* choice_smem, int lane,
                                 int* id, float* weight) {
  float lg[kRoutePerLane];
#pragma unroll
  for (int j = 0; j < kRoutePerLane; ++j) {
    const int e = lane + 32 * j;
    lg[j] = 0.0f;
    if (e < a.num_experts)
      lg[j] = a.logits_bf16
                  ? __bfloat162float(static_cast<const bf16*>(a.logits)[t * a.logits_stride + e])
                  : __ldcg(static_cast<const float*>(a.logits) + t * a.logits_stride + e);
  }
  RouteWarpLogits(a, lg, choice_smem, lane, id, weight);
}

}  // namespace pg::cuda::moe
