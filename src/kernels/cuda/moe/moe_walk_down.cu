// Route-walking MoE, kernel 2 in its tiled form (moe_params.h MoeWalkArgs; the one-warp-per-row
// form is DownKernel in moe_walk.cu): one block per (token t, tile of R consecutive hidden
// rows o0 .. o0 + R - 1). The block's work items are the (valid slot m, 16-byte chunk c) pairs
// of the token, flattened slot-major; thread i takes items i, i + T, i + 2T, ... (T threads).
// Per item it loads ONE act chunk and the R weight chunks of rows o0 .. o0 + R - 1 at column
// chunk c (R * U 16-byte loads in flight per thread), so
//   * each act chunk is read once per R weight chunks (DownKernel: once per weight chunk), and
//   * consecutive threads read consecutive chunks of one row: 512-byte warp segments, each row
//     streamed by the block end to end.
// The R partial sums of every thread are reduced in a fixed order (warp shuffle, then warps
// 0..kWarps-1 through shared memory): deterministic, atomic-free.
// Sum order differs from DownKernel's (per-chunk partials times the route weight, summed by
// thread and warp), so the two agree to f32 rounding, not bitwise.
// Vector path only (the host checks the layout). PDL launch: nothing is read before PdlWait,
// except in the preloading form (kPre, below).
#include <atomic>

#include "kernels/cuda/common/bulk_copy.cuh"
#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/moe/moe_device.cuh"
#include "kernels/cuda/moe/moe_route.cuh"

namespace pg::cuda {
namespace {

using moe::kChunk;

constexpr int kMaxSlots = 32;  // K = top_k + num_shared <= 32 (moe_register.cpp checks)

// Per-block table of the token's valid slots (compacted, slot order kept), R rows each.
template <int R>
struct SlotTable {
  const char* row[kMaxSlots];    // row o0 of the slot's down matrix (bytes)
  int64_t ld_bytes[kMaxSlots];   // row stride of that matrix (bytes)
  const float* act[kMaxSlots];   // act row of the slot, [inter] f32
  const float* blk[kMaxSlots];   // kBlock: block scales of rows o0.. (same 128-row block), else null
  float f[kMaxSlots][R];         // route weight x row scale, per row
  int count;
};

// kPre (MoeWalkArgs::down_preload): the slot table and the first round of weight loads are
// made BEFORE PdlWait, overlapping the gate/up kernel's tail. The routes then come from a
// kernel two launches back (the router kernel; with self-routing this kernel routes from its
// logits as the gate/up kernel does), which has completed once any block of this grid runs:
// this grid launches only after every gate/up block passed its own PdlWait (they trigger right
// after it), i.e. after the router kernel completed. Those reads go through L2 (__ldcg).
template <bool kFp8, int R, int U, int kWarps, bool kPre>
__global__ void __launch_bounds__(kWarps * 32) DownTileKernel(MoeWalkArgs a) {
  PG_BLOCK_TRACE(kTraceDownTile);
  constexpr int C = kChunk<kFp8>;
  constexpr int T = kWarps * 32;
  __shared__ SlotTable<R> tab;
  __shared__ float red[kWarps][R];
  __shared__ float s_choice[32 * moe::kRoutePerLane];
  if (!kPre) {
    PdlWait();  // ids, weights and act come from upstream kernels
    PdlTrigger();
  }
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t t = blockIdx.y;
  const int o0 = blockIdx.x * R;
  const MoeWeightLayout& L = a.layout;
  const int K = a.top_k + a.num_shared;
  const int64_t esz = kFp8 ? 1 : 2;
  if (warp == 0) {
    // Lane q describes slot q of token t.
    int e = -1;
    float wq = 0.0f;
    if (kPre && a.self_route) {
      moe::RouteWarp(a.route, t, s_choice, lane, &e, &wq);
    } else if (lane < a.top_k) {
      e = kPre ? __ldcg(a.ids + t * a.top_k + lane) : a.ids[t * a.top_k + lane];
      wq = kPre ? __ldcg(a.weights + t * a.ldw_route + lane) : a.weights[t * a.ldw_route + lane];
    }
    const char* row = nullptr;
    int64_t ld = 0;
    const float* scale = nullptr;
    int scale_ld = 0;
    int64_t col0 = 0;
    if (lane < K) {
      if (lane < a.top_k) {
        if (e >= 0 && e < a.num_experts) {
          const MoeExpertPtrs& w = a.experts[e];
          ld = L.ld_down * esz;
          row = static_cast<const char*>(w.down) + int64_t(o0) * ld;
          scale = w.down_scale;
          scale_ld = L.scale_ld_down;
        }
      } else {
        // Shared slot s: columns [s * inter, (s + 1) * inter) of the shared down rows (the
        // host checks s * inter % 128 == 0 for block scales).
        col0 = int64_t(lane - a.top_k) * a.inter;
        ld = a.shared_ld_down * esz;
        row = static_cast<const char*>(a.shared.down) + int64_t(o0) * ld + col0 * esz;
        wq = 1.0f;
        scale = a.shared.down_scale;
        scale_ld = a.shared_scale_ld_down;
      }
    }
    const unsigned valid = __ballot_sync(0xffffffffu, row != nullptr);
    if (row) {
      const int m = __popc(valid & ((1u << lane) - 1u));  // compacted index, slot order kept
      tab.row[m] = row;
      tab.ld_bytes[m] = ld;
      tab.act[m] = a.act + (t * K + lane) * a.inter;
      const moe::RowScale rs0 = moe::ScaleOfRow(scale, L.scale_mode, scale_ld, o0);
      tab.blk[m] = rs0.blocks ? rs0.blocks + (col0 >> 7) : nullptr;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int o = o0 + r < a.hidden ? o0 + r : o0;
        tab.f[m][r] = wq * moe::ScaleOfRow(scale, L.scale_mode, scale_ld, o).row;
      }
    }
    if (lane == 0) tab.count = __popc(valid);
  }
  __syncthreads();
  const int nc = a.inter / C, total = tab.count * nc;
  const int rows = a.hidden - o0 < R ? a.hidden - o0 : R;
  // accumulate: thread tid < rows's output value (the residual stream), loaded once the
  // upstream kernels are done (after PdlWait) and long before the store that needs it.
  float prev = 0.0f;
  auto load_prev = [&] {
    if (a.accumulate && tid < rows) prev = __bfloat162float(a.out[t * a.ldo + o0 + tid]);
  };
  if (!kPre) load_prev();
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  uint4 raw[U][R];
  int mq[U], cq[U];
  // Issues the weight loads of items base, base + T, ... base + (U - 1) T.
  auto load = [&](int base) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int idx = base + u * T;
      mq[u] = idx < total ? idx / nc : -1;
      cq[u] = idx < total ? idx - mq[u] * nc : 0;
      if (mq[u] >= 0) {
        const char* rp = tab.row[mq[u]];
        const int64_t ld = tab.ld_bytes[mq[u]];
#pragma unroll
        for (int r = 0; r < R; ++r)
          if (r < rows) raw[u][r] = __ldcs(reinterpret_cast<const uint4*>(rp + r * ld) + cq[u]);
      }
    }
  };
  // Multiplies the loaded chunks with their act chunks into acc.
  auto consume = [&]() {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (mq[u] < 0) continue;
      const int m = mq[u];
      float xf[C];
      moe::LoadX<C>(tab.act[m], cq[u], xf);
      const float* blk = tab.blk[m];
      const float bs = blk ? __ldg(blk + ((cq[u] * C) >> 7)) : 1.0f;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r >= rows) continue;
        float wf[C];
        moe::Widen<kFp8>(raw[u][r], wf);
        float part = 0.0f;
#pragma unroll
        for (int i = 0; i < C; ++i) part = fmaf(wf[i], xf[i], part);
        acc[r] = fmaf(tab.f[m][r], part * bs, acc[r]);
      }
    }
  };
  int base = tid;
  if (kPre) {
    load(base);  // weights only: streamed while the gate/up kernel drains
    PdlWait();   // act comes from the gate/up kernel
    PdlTrigger();
    load_prev();
    consume();
    base += T * U;
  }
  for (; base < total; base += T * U) {
    load(base);
    consume();
  }
  // MoeWalkArgs::l2_after: the block's weights have arrived; its share of the next weights.
  if (a.l2_after.ptr != nullptr && tid == 0 && t == 0)
    bulk::PrefetchL2Share(a.l2_after, int(blockIdx.x), int(gridDim.x));
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float v = moe::WarpSum(acc[r]);
    if (lane == 0) red[warp][r] = v;
  }
  __syncthreads();
  if (tid < rows) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += red[w][tid];
    if (a.accumulate) s += prev;
    a.out[t * a.ldo + o0 + tid] = __float2bfloat16_rn(s);
  }
}

template <bool kFp8, int R, int U, bool kPre>
void LaunchPre(const MoeWalkArgs& a, cudaStream_t stream) {
  const dim3 grid(unsigned((a.hidden + R - 1) / R), unsigned(a.num_tokens));
  if (a.down_warps >= 8)
    (void)LaunchPdl(DownTileKernel<kFp8, R, U, 8, kPre>, grid, dim3(256), 0, stream, a);
  else
    (void)LaunchPdl(DownTileKernel<kFp8, R, U, 4, kPre>, grid, dim3(128), 0, stream, a);
}

template <bool kFp8, int R, int U>
void LaunchRows(const MoeWalkArgs& a, cudaStream_t stream) {
  if (a.down_preload) LaunchPre<kFp8, R, U, true>(a, stream);
  else LaunchPre<kFp8, R, U, false>(a, stream);
}

template <bool kFp8>
void LaunchTyped(const MoeWalkArgs& a, cudaStream_t stream) {
  // R x U = 16 loads of 16 bytes in flight per thread.
  if (a.down_rows >= 8) LaunchRows<kFp8, 8, 2>(a, stream);
  else if (a.down_rows >= 4) LaunchRows<kFp8, 4, 4>(a, stream);
  else LaunchRows<kFp8, 2, 8>(a, stream);
}

}  // namespace

static std::atomic<long long> g_l2_after_launches{0};
long long MoeDownL2AfterLaunches() { return g_l2_after_launches.load(std::memory_order_relaxed); }

void LaunchMoeWalkDownTiled(const MoeWalkArgs& a, cudaStream_t stream) {
  if (a.l2_after.ptr != nullptr) g_l2_after_launches.fetch_add(1, std::memory_order_relaxed);
  if (a.layout.fp8) LaunchTyped<true>(a, stream);
  else LaunchTyped<false>(a, stream);
  // Launch errors: the caller checks cudaGetLastError (PG_CUDA_CHECK_LAUNCH).
}

}  // namespace pg::cuda
