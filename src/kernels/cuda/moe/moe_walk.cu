// Route-walking MoE experts for small batches (moe_params.h MoeWalkArgs): each route's
// expert rows are streamed once per route (memory bound; no sorting, no host sync).
//   Kernel 1: one warp per (route, pair of inter rows): gate and up dots over hidden,
//             SiLU * up -> act.
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

// Vector path of one (route, pair of inter rows): the gate and up chunks of both rows loaded
// side by side (8 16-byte loads in flight per lane), each x chunk read once for all four.
// Returns the lane's partial sums (gate0, up0, gate1, up1).
template <bool kFp8>
__device__ float4 GateUpVec2(const uint4* const w4[4], const bf16* x, int nc,
                             const moe::RowScale rs[4], int lane) {
  constexpr int C = kChunk<kFp8>;
  constexpr int U = 2;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int c0 = lane; c0 < nc; c0 += 32 * U) {
    uint4 raw[U][4];
#pragma unroll
    for (int q = 0; q < U; ++q) {
      const int c = c0 + 32 * q;
      if (c < nc)
#pragma unroll
        for (int m = 0; m < 4; ++m) raw[q][m] = __ldcs(w4[m] + c);
    }
#pragma unroll
    for (int q = 0; q < U; ++q) {
      const int c = c0 + 32 * q;
      if (c >= nc) break;
      float xf[C], wf[C];
      moe::LoadX<C>(x, c, xf);
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        moe::Widen<kFp8>(raw[q][m], wf);
        float part = 0.0f;
#pragma unroll
        for (int i = 0; i < C; ++i) part = fmaf(wf[i], xf[i], part);
        if (rs[m].blocks) part *= __ldg(rs[m].blocks + ((c * C) >> 7));
        acc[m] += part;
      }
    }
  }
  return make_float4(acc[0] * rs[0].row, acc[1] * rs[1].row, acc[2] * rs[2].row,
                     acc[3] * rs[3].row);
}

// One warp per (route r, pair of inter rows i0 = 2p, i1 = 2p + 1).
template <bool kFp8>
__global__ void __launch_bounds__(kWarps * 32) GateUpKernel(MoeWalkArgs a, bool vec) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t r = blockIdx.y;  // route
  const int i0 = 2 * (blockIdx.x * kWarps + warp);
  if (i0 >= a.inter) return;
  const int i1 = i0 + 1 < a.inter ? i0 + 1 : i0;  // odd inter: the last pair repeats its row
  const int e = a.ids[r];
  if (e < 0 || e >= a.num_experts) return;
  const MoeExpertPtrs& w = a.experts[e];
  const MoeWeightLayout& L = a.layout;
  const int64_t esz = kFp8 ? 1 : 2;
  const bf16* x = a.x + (r / a.top_k) * a.ldx;
  const char* rows[4] = {static_cast<const char*>(w.gate) + int64_t(i0) * L.ld_gate * esz,
                         static_cast<const char*>(w.up) + int64_t(i0) * L.ld_up * esz,
                         static_cast<const char*>(w.gate) + int64_t(i1) * L.ld_gate * esz,
                         static_cast<const char*>(w.up) + int64_t(i1) * L.ld_up * esz};
  const moe::RowScale rs[4] = {moe::ScaleOfRow(w.gate_scale, L.scale_mode, L.scale_ld_gu, i0),
                               moe::ScaleOfRow(w.up_scale, L.scale_mode, L.scale_ld_gu, i0),
                               moe::ScaleOfRow(w.gate_scale, L.scale_mode, L.scale_ld_gu, i1),
                               moe::ScaleOfRow(w.up_scale, L.scale_mode, L.scale_ld_gu, i1)};
  float v[4];
  if (vec) {
    const uint4* w4[4];
#pragma unroll
    for (int m = 0; m < 4; ++m) w4[m] = reinterpret_cast<const uint4*>(rows[m]);
    const float4 p = GateUpVec2<kFp8>(w4, x, a.hidden / kChunk<kFp8>, rs, lane);
    v[0] = p.x, v[1] = p.y, v[2] = p.z, v[3] = p.w;
  } else {
#pragma unroll
    for (int m = 0; m < 4; ++m) v[m] = RowDot<kFp8>(rows[m], x, a.hidden, rs[m], false, lane);
  }
#pragma unroll
  for (int m = 0; m < 4; ++m) v[m] = moe::WarpSum(v[m]);
  if (lane == 0) {
    a.act[r * a.inter + i0] = moe::Silu(v[0]) * v[1];
    if (i1 != i0) a.act[r * a.inter + i1] = moe::Silu(v[2]) * v[3];
  }
}

// One warp per (token t, hidden row o). Lane j < top_k describes route j (row pointer, weight
// times row scale, block scales, act row); the vector path walks the chunks of all valid
// routes as one flat sequence (route-major), kUnroll loads in flight per lane, so short rows
// (small inter) still keep the memory system busy. Order of the sums is fixed: deterministic.
template <bool kFp8>
__global__ void __launch_bounds__(kWarps * 32) DownKernel(MoeWalkArgs a, bool vec) {
  constexpr int C = kChunk<kFp8>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = blockIdx.y;
  const int o = blockIdx.x * kWarps + warp;
  if (o >= a.hidden) return;
  const MoeWeightLayout& L = a.layout;
  const int64_t esz = kFp8 ? 1 : 2;
  // Route `lane` of this token.
  const char* row = nullptr;
  const float* act = nullptr;
  float wj = 0.0f;
  moe::RowScale rs;
  if (lane < a.top_k) {
    const int64_t r = t * a.top_k + lane;
    const int e = a.ids[r];
    if (e >= 0 && e < a.num_experts) {
      const MoeExpertPtrs& w = a.experts[e];
      row = static_cast<const char*>(w.down) + int64_t(o) * L.ld_down * esz;
      act = a.act + r * a.inter;
      rs = moe::ScaleOfRow(w.down_scale, L.scale_mode, L.scale_ld_down, o);
      wj = a.weights[t * a.ldw_route + lane] * rs.row;
    }
  }
  float acc = 0.0f;
  if (vec) {
    const unsigned valid = __ballot_sync(0xffffffffu, row != nullptr);
    const int nc = a.inter / C, total = __popc(valid) * nc;
    for (int base = 0; base < total; base += 32 * kUnroll) {
      uint4 raw[kUnroll];
      const float* xs[kUnroll];
      const float* blk[kUnroll];
      float wq[kUnroll];
      int cq[kUnroll];
#pragma unroll
      for (int q = 0; q < kUnroll; ++q) {
        const int idx = base + 32 * q + lane;
        const int m = idx < total ? idx / nc : 0;
        const int src = int(__fns(valid, 0, m + 1));  // lane of the m-th valid route
        const auto* rp = reinterpret_cast<const char*>(
            __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(row), src));
        xs[q] = reinterpret_cast<const float*>(
            __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(act), src));
        blk[q] = reinterpret_cast<const float*>(
            __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(rs.blocks), src));
        wq[q] = __shfl_sync(0xffffffffu, wj, src);
        cq[q] = idx < total ? idx - m * nc : -1;
        if (cq[q] >= 0) raw[q] = __ldcs(reinterpret_cast<const uint4*>(rp) + cq[q]);
      }
#pragma unroll
      for (int q = 0; q < kUnroll; ++q) {
        if (cq[q] < 0) continue;
        float wf[C], xf[C];
        moe::Widen<kFp8>(raw[q], wf);
        moe::LoadX<C>(xs[q], cq[q], xf);
        float part = 0.0f;
#pragma unroll
        for (int i = 0; i < C; ++i) part = fmaf(wf[i], xf[i], part);
        if (blk[q]) part *= __ldg(blk[q] + ((cq[q] * C) >> 7));
        acc = fmaf(wq[q], part, acc);
      }
    }
    acc = moe::WarpSum(acc);
  } else {
    for (int j = 0; j < a.top_k; ++j) {
      const char* rp = reinterpret_cast<const char*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(row), j));
      const float* xp = reinterpret_cast<const float*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(act), j));
      moe::RowScale s;
      s.blocks = reinterpret_cast<const float*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(rs.blocks), j));
      const float wjj = __shfl_sync(0xffffffffu, wj, j);
      if (!rp) continue;
      acc = fmaf(wjj, moe::WarpSum(RowDot<kFp8>(rp, xp, a.inter, s, false, lane)), acc);
    }
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
  const dim3 g1(unsigned((a.inter + 2 * kWarps - 1) / (2 * kWarps)), unsigned(a.num_tokens * a.top_k));
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
