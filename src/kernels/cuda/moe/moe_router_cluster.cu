// One-cluster router for small batches (moe_params.h LaunchMoeRouterCluster): the FFN's RMSNorm
// (optional) + router GEMV + routing in ONE kernel, instead of NormLogitsKernel followed by the
// logits-form RouterKernel (moe_router.cu) — one kernel boundary less on the critical path in
// front of the walking gate/up kernel.
//
// Shape: one cluster of CS = ceil(E / W) blocks of W warps; warp w of block b owns expert
// e = b * W + w. Form 1: CS <= 8 (W = 4, 8 or 16 by E <= 32 / 64 / 128); form 2: W <= 8, so
// E = 128 runs 16 blocks (a non-portable cluster size). Everything of NormLogitsKernel's
// register form is kept: the router row lives in registers (kPre 16-byte chunks per lane,
// hidden <= 2048), loaded before PdlWait, as is the norm weight (here in shared memory, 8 KB,
// so 16 warps a block still fit in the register file). Per token every warp loads the whole x
// row, reduces its own sum of squares (no block barrier), takes its dot and stores the logit to
// global memory (the op's output) and into block 0's shared memory through distributed shared
// memory. After one cluster barrier (release / acquire), warp t of block 0 routes token t from
// those logits in registers (moe_route.cuh RouteWarpLogits, the function RouteWarp uses).
// Values: logits bitwise NormLogitsKernel's (same per-warp operations in the same order), and
// routes bitwise RouterKernel's on them (same f32 logits, same routing function).
#include <cooperative_groups.h>

#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/moe/moe_device.cuh"
#include "kernels/cuda/moe/moe_params.h"
#include "kernels/cuda/moe/moe_route.cuh"

namespace pg::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kPre = 8;         // 16-byte chunks of a row per lane: hidden <= 8 * 32 * kPre
constexpr int kMaxHidden = 8 * 32 * kPre;
constexpr int kMaxCluster = 8;  // portable cluster size

// <= 128 registers a thread (W = 16: one block fills an SM's register file; W <= 8: two fit,
// so a block finds room beside the previous kernel's blocks under PDL).
template <int W>
__global__ void __launch_bounds__(W * 32, W >= 16 ? 1 : 2) ClusterRouterKernel(MoeRouterArgs a) {
  __shared__ __align__(16) float s_g[kMaxHidden];                     // norm weight
  __shared__ float s_lg[kRouterClusterMaxTokens][kRouterClusterMaxExperts];  // block 0: logits
  __shared__ float s_choice[kRouterClusterMaxTokens][kRouterClusterMaxExperts];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int e = blockIdx.x * W + warp;
  const bool has_row = e < a.num_experts;
  const int nc = a.hidden / 8;
  const uint4* w4 = reinterpret_cast<const uint4*>(a.router_w + int64_t(has_row ? e : 0) * a.ld_router);
  uint4 w[kPre];
#pragma unroll
  for (int q = 0; q < kPre; ++q)
    if (lane + 32 * q < nc) w[q] = __ldg(w4 + lane + 32 * q);
  if (a.norm_w) {
    const float4* g4 = reinterpret_cast<const float4*>(a.norm_w);
    for (int i = threadIdx.x; i < a.hidden / 4; i += W * 32)
      reinterpret_cast<float4*>(s_g)[i] = __ldg(g4 + i);
  }
  __syncthreads();  // s_g (weights only: off the critical path, before the wait)
  PdlWait();        // x comes from upstream kernels; logits / normed / routes are written below
  PdlTrigger();
  cg::cluster_group cluster = cg::this_cluster();
  float* lg0 = cluster.map_shared_rank(&s_lg[0][0], 0);  // block 0's logits table
  float* logits = static_cast<float*>(const_cast<void*>(a.logits));
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    // x is read twice (sum of squares, then the dot; the second time from L1), so only the
    // router row stays in registers across the norm.
    const uint4* x4 = reinterpret_cast<const uint4*>(a.x + t * a.ldx);
    float inv = 1.0f;
    if (a.norm_w) {
      float ss = 0.0f;
#pragma unroll
      for (int q = 0; q < kPre; ++q) {
        if (lane + 32 * q >= nc) continue;
        float f[8];
        moe::Widen<false>(__ldg(x4 + lane + 32 * q), f);
#pragma unroll
        for (int i = 0; i < 8; ++i) ss = fmaf(f[i], f[i], ss);
      }
      inv = rsqrtf(moe::WarpSum(ss) / float(a.hidden) + a.eps);
    }
    bf16* out = a.norm_w && blockIdx.x == 0 && warp == 0 ? a.normed + t * a.ld_normed : nullptr;
    float acc = 0.0f;
#pragma unroll
    for (int q = 0; q < kPre; ++q) {
      const int c = lane + 32 * q;
      if (c >= nc) continue;
      float f[8], wf[8];
      moe::Widen<false>(__ldg(x4 + c), f);
      if (a.norm_w) {
        const float4 g0 = reinterpret_cast<const float4*>(s_g)[2 * c];
        const float4 g1 = reinterpret_cast<const float4*>(s_g)[2 * c + 1];
        const float gw[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
        __align__(16) bf16 ov[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          ov[i] = __float2bfloat16_rn(f[i] * inv * gw[i]);
          f[i] = __bfloat162float(ov[i]);
        }
        if (out) reinterpret_cast<uint4*>(out)[c] = *reinterpret_cast<const uint4*>(ov);
      }
      moe::Widen<false>(w[q], wf);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc = fmaf(wf[i], f[i], acc);
    }
    acc = moe::WarpSum(acc);
    if (has_row && lane == 0) {
      logits[t * a.logits_stride + e] = acc;
      lg0[t * kRouterClusterMaxExperts + e] = acc;
    }
  }
  cluster.sync();  // every logit is in block 0's shared memory (release / acquire)
  if (blockIdx.x != 0 || warp >= a.num_tokens) return;
  const int64_t t = warp;
  float lg[moe::kRoutePerLane];
#pragma unroll
  for (int j = 0; j < moe::kRoutePerLane; ++j) {
    const int ej = lane + 32 * j;
    lg[j] = ej < a.num_experts ? s_lg[t][ej] : 0.0f;
  }
  int id;
  float wt;
  moe::RouteWarpLogits(a, lg, s_choice[t], lane, &id, &wt);
  if (lane < a.top_k) {
    a.topk_ids[t * a.top_k + lane] = id;
    a.topk_weights[t * a.weights_stride + lane] = wt;
  }
}

template <int W>
cudaError_t LaunchCluster(const MoeRouterArgs& a, cudaStream_t stream) {
  const int blocks = (a.num_experts + W - 1) / W;
  if (blocks > kMaxCluster) {
    // 9-16 blocks: a non-portable cluster size (Hopper allows 16).
    static const cudaError_t once = cudaFuncSetAttribute(
        ClusterRouterKernel<W>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (once != cudaSuccess) return once;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(blocks));
  config.blockDim = dim3(W * 32);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = PdlEnabled() ? 1 : 0;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = unsigned(blocks);
  attr[1].val.clusterDim.y = 1;
  attr[1].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 2;
  return cudaLaunchKernelEx(&config, ClusterRouterKernel<W>, a);
}

}  // namespace

bool MoeRouterClusterFits(const MoeRouterArgs& a) {
  auto al16 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  return a.x && !a.residual && a.num_tokens >= 1 &&
         a.num_tokens <= kRouterClusterMaxTokens && a.num_experts <= kRouterClusterMaxExperts &&
         a.num_experts <= 16 * kMaxCluster && a.hidden <= kMaxHidden && a.hidden % 8 == 0 &&
         a.ldx % 8 == 0 && a.ld_router % 8 == 0 && al16(a.x) && al16(a.router_w) &&
         al16(a.norm_w) && (!a.normed || (a.ld_normed % 8 == 0 && al16(a.normed))) &&
         !a.logits_bf16 && a.top_k <= 32;
}

void LaunchMoeRouterCluster(const MoeRouterArgs& a, int form, cudaStream_t stream) {
  // form 1: W = the fewest warps a block with ceil(E / W) <= 8 blocks (more SMs share the
  // router rows); form 2: at most 8 warps a block (two blocks fit an SM), up to 16 blocks.
  const int max_warps = form >= 2 ? 8 : 16;
  if (a.num_experts <= 4 * kMaxCluster) (void)LaunchCluster<4>(a, stream);
  else if (a.num_experts <= 8 * kMaxCluster || max_warps == 8) (void)LaunchCluster<8>(a, stream);
  else (void)LaunchCluster<16>(a, stream);
  // Launch errors: the caller checks cudaGetLastError (PG_CUDA_CHECK_LAUNCH).
}

}  // namespace pg::cuda
