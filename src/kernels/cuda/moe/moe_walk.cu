// Route-walking MoE experts for small batches (moe_params.h MoeWalkArgs): each route's
// expert rows are streamed once per route (memory bound; no sorting, no host sync).
//   Kernel 1: one warp per (route, inter row): gate and up dots over hidden, SiLU * up -> act.
//   Kernel 2: one warp per (token, hidden row): down dots of the token's routes in order
//             j = 0..top_k-1, weighted sum, one store (atomic-free, deterministic).
// Vector path: 16-byte weight loads (16 fp8 / 8 bf16 elements), when rows are multiples of a
// chunk and 16-byte aligned; otherwise an element loop.
#include "kernels/cuda/moe/moe_device.cuh"

namespace pg::cuda {
namespace {

using moe::kChunk;

constexpr int kWarps = 8;
constexpr int kUnroll = 4;

// Lane's share of dot(w_row[0, cols), x[0, cols)), scales applied (warp-reduce afterwards).
template <bool kFp8, typename XT>
__device__ float RowDot(const void* w_row, const XT* x, int cols, moe::RowScale rs, bool vec,
                        int lane) {
  constexpr int C = kChunk<kFp8>;
  float acc = 0.0f;
  if (vec) {
    const uint4* w4 = static_cast<const uint4*>(w_row);
    const int nc = cols / C;
    int c = lane;
    for (; c + 32 * (kUnroll - 1) < nc; c += 32 * kUnroll) {
      uint4 raw[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) raw[u] = __ldcs(w4 + c + 32 * u);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float wf[C], xf[C];
        moe::Widen<kFp8>(raw[u], wf);
        moe::LoadX<C>(x, c + 32 * u, xf);
        float part = 0.0f;
#pragma unroll
        for (int q = 0; q < C; ++q) part = fmaf(wf[q], xf[q], part);
        acc += rs.blocks ? part * __ldg(rs.blocks + (((c + 32 * u) * C) >> 7)) : part;
      }
    }
    for (; c < nc; c += 32) {
      float wf[C], xf[C];
      moe::Widen<kFp8>(__ldcs(w4 + c), wf);
      moe::LoadX<C>(x, c, xf);
      float part = 0.0f;
#pragma unroll
      for (int q = 0; q < C; ++q) part = fmaf(wf[q], xf[q], part);
      acc += rs.blocks ? part * __ldg(rs.blocks + ((c * C) >> 7)) : part;
    }
  } else {
    for (int i = lane; i < cols; i += 32) {
      float wv = moe::WeightAt<kFp8>(w_row, i);
      if (rs.blocks) wv *= __ldg(rs.blocks + (i >> 7));
      float xv;
      if constexpr (sizeof(XT) == 2) xv = __bfloat162float(x[i]);
      else xv = x[i];
      acc = fmaf(wv, xv, acc);
    }
  }
  return acc * rs.row;
}

template <bool kFp8>
__global__ void __launch_bounds__(kWarps * 32) GateUpKernel(MoeWalkArgs a, bool vec) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t r = blockIdx.y;  // route
  const int i = blockIdx.x * kWarps + warp;
  if (i >= a.inter) return;
  const int e = a.ids[r];
  if (e < 0 || e >= a.num_experts) return;
  const MoeExpertPtrs& w = a.experts[e];
  const MoeWeightLayout& L = a.layout;
  const int64_t esz = kFp8 ? 1 : 2;
  const bf16* x = a.x + (r / a.top_k) * a.ldx;
  const char* g_row = static_cast<const char*>(w.gate) + int64_t(i) * L.ld_gate * esz;
  const char* u_row = static_cast<const char*>(w.up) + int64_t(i) * L.ld_up * esz;
  const float g = moe::WarpSum(RowDot<kFp8>(
      g_row, x, a.hidden, moe::ScaleOfRow(w.gate_scale, L.scale_mode, L.scale_ld_gu, i), vec, lane));
  const float u = moe::WarpSum(RowDot<kFp8>(
      u_row, x, a.hidden, moe::ScaleOfRow(w.up_scale, L.scale_mode, L.scale_ld_gu, i), vec, lane));
  if (lane == 0) a.act[r * a.inter + i] = moe::Silu(g) * u;
}

template <bool kFp8>
__global__ void __launch_bounds__(kWarps * 32) DownKernel(MoeWalkArgs a, bool vec) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = blockIdx.y;
  const int o = blockIdx.x * kWarps + warp;
  if (o >= a.hidden) return;
  const MoeWeightLayout& L = a.layout;
  const int64_t esz = kFp8 ? 1 : 2;
  float acc = 0.0f;
  for (int j = 0; j < a.top_k; ++j) {
    const int64_t r = t * a.top_k + j;
    const int e = a.ids[r];
    if (e < 0 || e >= a.num_experts) continue;
    const MoeExpertPtrs& w = a.experts[e];
    const char* d_row = static_cast<const char*>(w.down) + int64_t(o) * L.ld_down * esz;
    const float y = moe::WarpSum(RowDot<kFp8>(
        d_row, a.act + r * a.inter, a.inter,
        moe::ScaleOfRow(w.down_scale, L.scale_mode, L.scale_ld_down, o), vec, lane));
    acc = fmaf(a.weights[t * a.ldw_route + j], y, acc);
  }
  if (lane == 0) {
    bf16* out = a.out + t * a.ldo + o;
    if (a.accumulate) acc += __bfloat162float(*out);
    *out = __float2bfloat16_rn(acc);
  }
}

template <bool kFp8>
void Launch(const MoeWalkArgs& a, cudaStream_t stream) {
  constexpr int C = kChunk<kFp8>;
  const int64_t esz = kFp8 ? 1 : 2;
  // Vector path: whole 16-byte chunks on every row, aligned bases and strides.
  auto aligned = [](int64_t ld_bytes) { return ld_bytes % 16 == 0; };
  const bool vec = a.layout.aligned16 && a.hidden % C == 0 && a.inter % C == 0 && aligned(a.ldx * 2) &&
                   aligned(a.layout.ld_gate * esz) && aligned(a.layout.ld_up * esz) &&
                   aligned(a.layout.ld_down * esz) && (reinterpret_cast<uintptr_t>(a.x) & 15) == 0 &&
                   (int64_t(a.inter) * 4) % 16 == 0;
  const dim3 g1(unsigned((a.inter + kWarps - 1) / kWarps), unsigned(a.num_tokens * a.top_k));
  GateUpKernel<kFp8><<<g1, kWarps * 32, 0, stream>>>(a, vec);
  const dim3 g2(unsigned((a.hidden + kWarps - 1) / kWarps), unsigned(a.num_tokens));
  DownKernel<kFp8><<<g2, kWarps * 32, 0, stream>>>(a, vec);
}

}  // namespace

void LaunchMoeWalk(const MoeWalkArgs& a, cudaStream_t stream) {
  // Chunks of tokens keep grid.y (routes) within 65535; act is reused by each chunk in turn.
  const int64_t chunk = 65535 / a.top_k;
  for (int64_t t0 = 0; t0 < a.num_tokens; t0 += chunk) {
    MoeWalkArgs c = a;
    c.num_tokens = a.num_tokens - t0 < chunk ? a.num_tokens - t0 : chunk;
    c.x += t0 * a.ldx;
    c.ids += t0 * a.top_k;
    c.weights += t0 * a.ldw_route;
    c.out += t0 * a.ldo;
    if (a.layout.fp8) Launch<true>(c, stream);
    else Launch<false>(c, stream);
  }
}

}  // namespace pg::cuda
