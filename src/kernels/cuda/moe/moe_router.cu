// MoE router (ops_moe.h MoeRouterParams for the semantics), two forms:
//  * RouterKernel: one warp per token over precomputed logits (one instantiation a routing
//    form: registers up to 256 experts, shared memory above);
//  * FusedRouterKernel (small batches): one warp per expert computes that expert's logits for
//    every token (router row loaded into registers before PdlWait: weights only), then the
//    block that arrives last routes every token. One kernel instead of GEMV + router; with the
//    fused RMSNorm (+ residual add) every block normalises the rows on the fly and the last
//    block stores them, one kernel instead of RmsNorm + GEMV + router. With defer_route it
//    stops after the logits (the walking gate/up kernel routes); NormLogitsKernel is that
//    deferred form for rows up to 2048 without a residual, everything in registers.
// (A one-cluster form meeting in distributed shared memory instead of the counter measured
// slower still on the H200 — Qwen3-30B-A3B norm + router 13.4 vs 11.0 us — and was dropped:
// commit 68e9a1a has it.)
// The token's scores and choice scores live in shared memory ([2][num_experts] f32 per warp);
// selection is repeated warp arg-max (value descending, index ascending on ties), so the
// result is the reference's up to f32 rounding of the scores.
#include <cuda_bf16.h>

#include <atomic>
#include <cfloat>

#include "core/env.h"
#include "kernels/cuda/common/bulk_copy.cuh"
#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/moe/moe_device.cuh"
#include "kernels/cuda/moe/moe_params.h"
#include "kernels/cuda/moe/moe_route.cuh"

namespace pg::cuda {
namespace {

using moe::WarpSum;

constexpr int kWarps = 4;
// Fused form: 16-byte router chunks per lane held in registers from before PdlWait (covers a
// 2048-wide bf16 row; longer rows stream the rest after the wait).
constexpr int kPreChunks = 8;

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


// Routes token t (whole warp). score / choice: [num_experts] f32 of shared memory. f32 logits
// are read through L2 (__ldcg): in the fused form other blocks of this grid wrote them.
__device__ void RouteToken(const MoeRouterArgs& a, int64_t t, float* score, float* choice,
                           int lane) {
  const int E = a.num_experts;
  // Scores.
  float mx = -FLT_MAX;
  for (int e = lane; e < E; e += 32) {
    const float l = a.logits_bf16
                        ? __bfloat162float(static_cast<const bf16*>(a.logits)[t * a.logits_stride + e])
                        : __ldcg(static_cast<const float*>(a.logits) + t * a.logits_stride + e);
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

  if (a.num_groups > 1 && a.topk_groups < a.num_groups) moe::MaskGroups(a, choice, lane);

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
  __syncwarp();  // score / choice are reused by the warp's next token
}

// Routes token t: in registers (moe_route.cuh) up to 32 * kRoutePerLane experts, else
// through shared memory (RouteToken); kForm fixes the form at compile time (the caller knows
// the expert count), so a kernel carries only that form's code. score / choice:
// [num_experts] f32 of shared memory.
enum RouteForm { kRouteByCount, kRouteRegs, kRouteShared };
template <RouteForm kForm = kRouteByCount>
__device__ void RouteAny(const MoeRouterArgs& a, int64_t t, float* score, float* choice, int lane) {
  if (kForm == kRouteShared ||
      (kForm == kRouteByCount && a.num_experts > 32 * moe::kRoutePerLane))
    return RouteToken(a, t, score, choice, lane);
  int id;
  float w;
  moe::RouteWarp(a, t, choice, lane, &id, &w);
  if (lane < a.top_k) {
    a.topk_ids[t * a.top_k + lane] = id;
    a.topk_weights[t * a.weights_stride + lane] = w;
  }
}

// kReg: a.num_experts <= 32 * kRoutePerLane, routed in registers only (the kernel carries no
// shared-memory routing code).
template <bool kReg>
__global__ void __launch_bounds__(kWarps * 32) RouterKernel(MoeRouterArgs a) {
  PG_BLOCK_TRACE(kTraceRouter);
  extern __shared__ float smem[];
  PdlWait();  // logits come from the router matmul
  PdlTrigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = int64_t(blockIdx.x) * kWarps + warp;
  if (t >= a.num_tokens) return;
  float* score = smem + size_t(warp) * 2 * a.num_experts;
  RouteAny<kReg ? kRouteRegs : kRouteShared>(a, t, score, score + a.num_experts, lane);
  PG_TRACE_MARK(2);  // routes stored
}

__device__ __forceinline__ float RoundBf16(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

// Element i of the norm's input row: bf16(residual + x) with a residual, else x.
__device__ __forceinline__ float NormIn(const bf16* xt, const bf16* rt, int64_t i) {
  const float v = __bfloat162float(xt[i]);
  return rt ? RoundBf16(__bfloat162float(rt[i]) + v) : v;
}

// The norm input's chunk c (8 elements): bf16(residual + x) with a residual, else x.
__device__ __forceinline__ void NormIn8(const bf16* xt, const bf16* rt, int64_t c, float* f) {
  moe::LoadX<8>(xt, c, f);
  if (!rt) return;
  float r[8];
  moe::LoadX<8>(rt, c, r);
#pragma unroll
  for (int q = 0; q < 8; ++q) f[q] = RoundBf16(r[q] + f[q]);
}

// 1 / rms of token row t's norm input (whole block of W warps; `red`: W floats of shared
// memory).
// The loads of a thread are independent (unrolled): no chain of dependent L2 round trips.
template <int W = kWarps>
__device__ float InvRms(const MoeRouterArgs& a, const bf16* xt, const bf16* rt, bool vec,
                        float* red) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float ss = 0.0f;
  if (vec) {
    const int nc = a.hidden / 8;
#pragma unroll 4
    for (int c = threadIdx.x; c < nc; c += blockDim.x) {
      float f[8];
      NormIn8(xt, rt, c, f);
#pragma unroll
      for (int q = 0; q < 8; ++q) ss = fmaf(f[q], f[q], ss);
    }
  } else {
#pragma unroll 8
    for (int64_t i = threadIdx.x; i < a.hidden; i += blockDim.x) {
      const float v = NormIn(xt, rt, i);
      ss = fmaf(v, v, ss);
    }
  }
  ss = WarpSum(ss);
  if (lane == 0) red[warp] = ss;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < W; ++w) total += red[w];
  __syncthreads();  // red is reused by the next token
  return rsqrtf(total / float(a.hidden) + a.eps);
}

// The router's input for chunk c (8 elements) of token row t: x, or the normed row computed
// on the fly (bf16-rounded as `normed` stores it).
__device__ __forceinline__ void LoadIn8(const MoeRouterArgs& a, const bf16* xt, const bf16* rt,
                                        float inv, int64_t c, float* f) {
  if (!a.norm_w) return moe::LoadX<8>(xt, c, f);
  NormIn8(xt, rt, c, f);
  const float4* g = reinterpret_cast<const float4*>(a.norm_w + c * 8);
  const float4 g0 = __ldg(g), g1 = __ldg(g + 1);
  const float gw[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
  for (int q = 0; q < 8; ++q) f[q] = RoundBf16(f[q] * inv * gw[q]);
}

// Dot of 8 bf16 weights with the router input's chunk c.
__device__ __forceinline__ float Dot8(const uint4& w, const MoeRouterArgs& a, const bf16* xt,
                                      const bf16* rt, float inv, int64_t c) {
  float wf[8], xf[8];
  moe::Widen<false>(w, wf);
  LoadIn8(a, xt, rt, inv, c, xf);
  float part = 0.0f;
#pragma unroll
  for (int q = 0; q < 8; ++q) part = fmaf(wf[q], xf[q], part);
  return part;
}

// Token t's norm outputs (whole block; inv = InvRms of the row): residual = bf16(residual + x)
// when given, normed = bf16(v * inv * norm_w). Each element is read, then written, by the same
// thread; no other block may still read the row's residual.
__device__ void StoreNormRow(const MoeRouterArgs& a, int64_t t, float inv, bool vec) {
  const bf16* xt = a.x + t * a.ldx;
  bf16* rt = a.residual ? a.residual + t * a.ld_res : nullptr;
  bf16* out = a.normed + t * a.ld_normed;
  if (vec) {
#pragma unroll 4
    for (int c = threadIdx.x; c < a.hidden / 8; c += blockDim.x) {
      float v[8];
      NormIn8(xt, rt, c, v);
      const float4* g = reinterpret_cast<const float4*>(a.norm_w + c * 8);
      const float4 g0 = __ldg(g), g1 = __ldg(g + 1);
      const float gw[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
      __align__(16) bf16 rv[8], ov[8];
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        rv[q] = __float2bfloat16_rn(v[q]);
        ov[q] = __float2bfloat16_rn(v[q] * inv * gw[q]);
      }
      if (rt) reinterpret_cast<uint4*>(rt)[c] = *reinterpret_cast<const uint4*>(rv);
      reinterpret_cast<uint4*>(out)[c] = *reinterpret_cast<const uint4*>(ov);
    }
  } else {
#pragma unroll 8
    for (int64_t i = threadIdx.x; i < a.hidden; i += blockDim.x) {
      const float v = NormIn(xt, rt, i);
      if (rt) rt[i] = __float2bfloat16_rn(v);
      out[i] = __float2bfloat16_rn(v * inv * a.norm_w[i]);
    }
  }
}

// Fused form: warp w of block b owns expert e = b * kWarps + w. `vec`: 16-byte loads (hidden
// a multiple of 8, 16-byte aligned rows of x, residual, norm weight and router).
__global__ void __launch_bounds__(kWarps * 32) FusedRouterKernel(MoeRouterArgs a, bool vec) {
  PG_BLOCK_TRACE(kTraceFusedRouter);
  extern __shared__ float smem[];
  __shared__ bool last;
  __shared__ float red[kWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int e = blockIdx.x * kWarps + warp;
  const bool has_row = e < a.num_experts;
  const bf16* wrow = a.router_w + int64_t(has_row ? e : 0) * a.ld_router;
  const uint4* w4 = reinterpret_cast<const uint4*>(wrow);
  const int nc = vec ? a.hidden / 8 : 0;
  uint4 pre[kPreChunks];
#pragma unroll
  for (int q = 0; q < kPreChunks; ++q)
    if (has_row && lane + 32 * q < nc) pre[q] = __ldg(w4 + lane + 32 * q);
  PdlWait();  // x / residual come from upstream kernels; logits, ids, counter are written below
  PdlTrigger();
  float* logits = static_cast<float*>(const_cast<void*>(a.logits));
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    const bf16* xt = a.x + t * a.ldx;
    const bf16* rt = a.norm_w && a.residual ? a.residual + t * a.ld_res : nullptr;
    const float inv = a.norm_w ? InvRms(a, xt, rt, vec, red) : 1.0f;  // whole block
    // Deferred routing: block 0 stores the normed row (no residual: x is nobody's output here).
    if (a.defer_route && a.norm_w && blockIdx.x == 0) StoreNormRow(a, t, inv, vec);
    if (!has_row) continue;
    float acc = 0.0f;
    if (vec) {
#pragma unroll
      for (int q = 0; q < kPreChunks; ++q)
        if (lane + 32 * q < nc) acc += Dot8(pre[q], a, xt, rt, inv, lane + 32 * q);
      for (int c = lane + 32 * kPreChunks; c < nc; c += 32) acc += Dot8(__ldg(w4 + c), a, xt, rt, inv, c);
    } else {
      for (int i = lane; i < a.hidden; i += 32) {
        float v = __bfloat162float(xt[i]);
        if (a.norm_w) v = RoundBf16(NormIn(xt, rt, i) * inv * a.norm_w[i]);
        acc = fmaf(__bfloat162float(wrow[i]), v, acc);
      }
    }
    acc = WarpSum(acc);
    if (lane == 0) logits[t * a.logits_stride + e] = acc;
  }
  if (a.defer_route) return;  // the experts' gate/up kernel routes (MoeWalkArgs::self_route)
  // Arrival: the last block to finish its logits (and its reads of x / residual) routes every
  // token and writes the norm's outputs.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(a.counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (threadIdx.x == 0) *a.counter = 0;  // ready for the next (stream-ordered) launch
  if (a.norm_w) {
    for (int64_t t = 0; t < a.num_tokens; ++t) {
      const float inv = InvRms(a, a.x + t * a.ldx, a.residual ? a.residual + t * a.ld_res : nullptr,
                               vec, red);
      StoreNormRow(a, t, inv, vec);
    }
  }
  float* score = smem + size_t(warp) * 2 * a.num_experts;
  for (int64_t t = warp; t < a.num_tokens; t += kWarps)
    RouteAny(a, t, score, score + a.num_experts, lane);
}

// Deferred-routing form for rows of at most 32 * kPreChunks chunks (hidden <= 2048), no
// residual: one warp per expert with everything in registers — its router row and the norm
// weight are loaded before PdlWait; per token each warp loads the whole x row once (kPreChunks
// chunks per lane), reduces its sum of squares itself (every warp the same 1/rms: no block
// barrier) and takes the dot. Warp 0 of block 0 stores the normed row. Same values as
// FusedRouterKernel's (bf16-rounded normed inputs), up to the f32 order of the squares' sum.
// kNorm: a.norm_w is set (the RMSNorm in front), fixed at compile time. kL2: a.l2_after is
// set (its own instantiation, so the kernel without the hint is the code it was).
template <bool kNorm, bool kL2 = false>
__global__ void __launch_bounds__(kWarps * 32) NormLogitsKernel(MoeRouterArgs a, bool warm) {
  PG_BLOCK_TRACE(kTraceNormLogits);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int e = blockIdx.x * kWarps + warp;
  const bool has_row = e < a.num_experts;
  const int nc = a.hidden / 8;
  const uint4* w4 = reinterpret_cast<const uint4*>(a.router_w + int64_t(has_row ? e : 0) * a.ld_router);
  uint4 w[kPreChunks];
  float4 g[kPreChunks][2];
#pragma unroll
  for (int q = 0; q < kPreChunks; ++q) {
    const int c = lane + 32 * q;
    if (c < nc) {
      w[q] = __ldg(w4 + c);
      if (kNorm) {
        const float4* gp = reinterpret_cast<const float4*>(a.norm_w + c * 8);
        g[q][0] = __ldg(gp), g[q][1] = __ldg(gp + 1);
      }
    }
  }
  float* logits = static_cast<float*>(const_cast<void*>(a.logits));
  // warm: pass 0, before PdlWait (the kernel launches while the o projection still runs),
  // takes token 0 with its own router row as x and stores nothing: the same instructions, so
  // pass 1 finds them and the parameters in the SM's caches.
#pragma unroll 1
  for (int pass = warm ? 0 : 1; pass < 2; ++pass) {
    const bool real = pass == 1;
    if (real) {
      PdlWait();  // x comes from upstream kernels; logits / normed are written below
      PdlTrigger();
    }
    for (int64_t t = 0; t < (real ? a.num_tokens : 1); ++t) {
      const uint4* x4 = reinterpret_cast<const uint4*>(a.x + t * a.ldx);
      uint4 xr[kPreChunks];
#pragma unroll
      for (int q = 0; q < kPreChunks; ++q)
        if (lane + 32 * q < nc) xr[q] = real ? __ldg(x4 + lane + 32 * q) : w[q];
      // The hint behind this block's x loads (MoeRouterArgs::l2_after): its share of the next
      // weights, while the HBM has nothing else to do until the experts' stream.
      if (kL2 && real && t == 0 && threadIdx.x == 0) bulk::PrefetchL2Share(a.l2_after, int(blockIdx.x), int(gridDim.x));
      float inv = 1.0f;
      if (kNorm) {
        float ss = 0.0f;
#pragma unroll
        for (int q = 0; q < kPreChunks; ++q) {
          if (lane + 32 * q >= nc) continue;
          float f[8];
          moe::Widen<false>(xr[q], f);
#pragma unroll
          for (int i = 0; i < 8; ++i) ss = fmaf(f[i], f[i], ss);
        }
        inv = rsqrtf(WarpSum(ss) / float(a.hidden) + a.eps);
      }
      PG_TRACE_MARK(0);  // x arrived, 1 / rms
      bf16* out = real && kNorm && blockIdx.x == 0 && warp == 0 ? a.normed + t * a.ld_normed : nullptr;
      float acc = 0.0f;
#pragma unroll
      for (int q = 0; q < kPreChunks; ++q) {
        const int c = lane + 32 * q;
        if (c >= nc) continue;
        float f[8], wf[8];
        moe::Widen<false>(xr[q], f);
        if (kNorm) {
          const float gw[8] = {g[q][0].x, g[q][0].y, g[q][0].z, g[q][0].w,
                               g[q][1].x, g[q][1].y, g[q][1].z, g[q][1].w};
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
      acc = WarpSum(acc);
      PG_TRACE_MARK(1);  // dot
      if (real && has_row && lane == 0) logits[t * a.logits_stride + e] = acc;
    }
  }
  PG_TRACE_MARK(2);  // logits stored
}

std::atomic<long long> g_router_l2_launches{0};

}  // namespace

long long MoeRouterL2AfterLaunches() { return g_router_l2_launches.load(std::memory_order_relaxed); }

void LaunchMoeRouter(const MoeRouterArgs& a, cudaStream_t stream) {
  if (a.num_tokens == 0) return;
  // NormLogitsKernel's warm pass (PEREGRINE_MOE_NORM_LOGITS_WARM=0: off). H200, Qwen3-30B-A3B
  // 1 x 1K, three calls, two rounds each: -28 to -55 us a step (its post-wait time 3.8 -> 2.7 us
  // a layer in a block trace); DeepSeek-V2-Lite -6 us (docs/PERF.md "Session 16").
  static const bool warm = EnvFlag("PEREGRINE_MOE_NORM_LOGITS_WARM", true);
  const size_t smem = size_t(kWarps) * 2 * size_t(a.num_experts) * sizeof(float);
  if (a.x) {
    auto al16 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
    const bool vec = a.hidden % 8 == 0 && a.ldx % 8 == 0 && a.ld_router % 8 == 0 && al16(a.x) &&
                     al16(a.router_w) && al16(a.norm_w) &&
                     (!a.residual || (a.ld_res % 8 == 0 && al16(a.residual))) &&
                     (!a.normed || (a.ld_normed % 8 == 0 && al16(a.normed)));
    const unsigned blocks = unsigned((a.num_experts + kWarps - 1) / kWarps);
    if (a.defer_route && vec && !a.residual && a.hidden <= 8 * 32 * kPreChunks) {
      const bool l2 = a.l2_after.ptr != nullptr;
      if (l2) g_router_l2_launches.fetch_add(1, std::memory_order_relaxed);
      (void)LaunchPdl(a.norm_w ? (l2 ? NormLogitsKernel<true, true> : NormLogitsKernel<true>)
                               : (l2 ? NormLogitsKernel<false, true> : NormLogitsKernel<false>),
                      dim3(blocks), dim3(kWarps * 32), 0, stream, a, warm);
    } else {
      (void)LaunchPdl(FusedRouterKernel, dim3(blocks), dim3(kWarps * 32), smem, stream, a, vec);
    }
  } else {
    const unsigned blocks = unsigned((a.num_tokens + kWarps - 1) / kWarps);
    if (a.num_experts <= 32 * moe::kRoutePerLane)
      (void)LaunchPdl(RouterKernel<true>, dim3(blocks), dim3(kWarps * 32), smem, stream, a);
    else
      (void)LaunchPdl(RouterKernel<false>, dim3(blocks), dim3(kWarps * 32), smem, stream, a);
  }
  // Launch errors: the caller checks cudaGetLastError (PG_CUDA_CHECK_LAUNCH).
}

}  // namespace pg::cuda
