// MoE router: one warp per token (ops_moe.h MoeRouterParams for the semantics).
// The token's scores and choice scores live in shared memory ([2][num_experts] f32 per warp);
// selection is repeated warp arg-max (value descending, index ascending on ties), so the
// result is the reference's up to f32 rounding of the scores.
#include <cuda_bf16.h>

#include <cfloat>

#include "kernels/cuda/moe/moe_params.h"

namespace pg::cuda {
namespace {

constexpr int kWarps = 4;

struct Best {
  float v;
  int i;
};

// a beats b: larger value, or equal value and lower index.
__device__ __forceinline__ bool Beats(float av, int ai, float bv, int bi) {
  return av > bv || (av == bv && ai < bi);
}

__device__ __forceinline__ Best WarpArgMax(Best b) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, b.v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, b.i, o);
    if (Beats(ov, oi, b.v, b.i)) b = {ov, oi};
  }
  return b;
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__global__ void __launch_bounds__(kWarps * 32) RouterKernel(MoeRouterArgs a) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = int64_t(blockIdx.x) * kWarps + warp;
  if (t >= a.num_tokens) return;
  const int E = a.num_experts;
  float* score = smem + size_t(warp) * 2 * E;
  float* choice = score + E;

  // Scores.
  float mx = -FLT_MAX;
  for (int e = lane; e < E; e += 32) {
    const float l = a.logits_bf16
                        ? __bfloat162float(static_cast<const bf16*>(a.logits)[t * a.logits_stride + e])
                        : static_cast<const float*>(a.logits)[t * a.logits_stride + e];
    score[e] = l;
    mx = fmaxf(mx, l);
  }
  if (a.sigmoid) {
    for (int e = lane; e < E; e += 32) score[e] = 1.0f / (1.0f + expf(-score[e]));
  } else {
    mx = WarpMax(mx);
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32) sum += (score[e] = expf(score[e] - mx));
    const float inv = 1.0f / WarpSum(sum);
    for (int e = lane; e < E; e += 32) score[e] *= inv;
  }
  for (int e = lane; e < E; e += 32) choice[e] = score[e] + (a.bias ? a.bias[e] : 0.0f);
  __syncwarp();

  // Group-limited eligibility: lane g scores group g (sum of its best two choice scores).
  if (a.num_groups > 1 && a.topk_groups < a.num_groups) {
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
      const Best b = WarpArgMax({(keep >> lane) & 1u ? -FLT_MAX : gscore,
                                 lane < a.num_groups ? lane : 1 << 30});
      keep |= 1u << b.i;
    }
    __syncwarp();
    for (int e = lane; e < E; e += 32)
      if (!((keep >> (e / per)) & 1u)) choice[e] = -FLT_MAX;
    __syncwarp();
  }

  // Top-k by repeated arg-max; a chosen expert's choice score becomes -inf (below any
  // eligible score, which is finite; ineligible ones are -FLT_MAX).
  int my_id = -1;
  float my_score = 0.0f, sum = 0.0f;
  for (int j = 0; j < a.top_k; ++j) {
    Best b{-INFINITY, 1 << 30};
    for (int e = lane; e < E; e += 32)
      if (Beats(choice[e], e, b.v, b.i)) b = {choice[e], e};
    b = WarpArgMax(b);
    const float s = score[b.i];
    sum += s;
    if (lane == j) my_id = b.i, my_score = s;
    __syncwarp();
    if (lane == 0) choice[b.i] = -INFINITY;
    __syncwarp();
  }
  if (lane < a.top_k) {
    float w = my_score;
    if (a.renormalize) w /= sum + 1e-20f;
    a.topk_ids[t * a.top_k + lane] = my_id;
    a.topk_weights[t * a.weights_stride + lane] = w * a.scaling;
  }
}

}  // namespace

void LaunchMoeRouter(const MoeRouterArgs& a, cudaStream_t stream) {
  if (a.num_tokens == 0) return;
  const unsigned blocks = unsigned((a.num_tokens + kWarps - 1) / kWarps);
  const size_t smem = size_t(kWarps) * 2 * size_t(a.num_experts) * sizeof(float);
  RouterKernel<<<blocks, kWarps * 32, smem, stream>>>(a);
}

}  // namespace pg::cuda
