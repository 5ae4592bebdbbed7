// Device sampling (sample.cu), part 2: the exact radix walks over the whole row (four passes
// of 8-bit digits of SortKey). The fallback of the histogram cuts (sample_cut.cuh) when a
// cut's bin holds more candidates than fit in shared memory (very flat rows, huge top-k) or
// the fp32 localisation of a top-p cut misses (rounding right at a bin edge).
#pragma once

#include "kernels/cuda/sampling/sample_row.cuh"

namespace pg::cuda {
namespace {

// Histogram updates aggregated per warp: logits' keys share few top digits, so per-thread
// shared-memory atomics would serialise on a handful of bins. Lanes with the same bin are
// grouped (__match_any_sync) and their leader adds the group's count or summed mass.
// bin < 0: this lane adds nothing. Called by every active lane of the warp.
__device__ void BinCount(int* count, int bin) {
  const unsigned group = __match_any_sync(__activemask(), bin);
  if (bin >= 0 && int(threadIdx.x % 32) == __ffs(group) - 1) atomicAdd(&count[bin], __popc(group));
}
// `mass` is the calling warp's own histogram (no other warp adds to it: fp64 shared-memory
// atomics are compare-and-swap loops, slow under contention between warps).
__device__ void BinMass(double* mass, int bin, double w) {
  const unsigned group = __match_any_sync(__activemask(), bin);
  if (bin < 0) return;  // the whole group adds nothing (all its lanes have this bin)
  double sum = 0.0;
  for (unsigned m = group; m; m &= m - 1) sum += __shfl_sync(group, w, __ffs(m) - 1);
  if (bin >= 0 && int(threadIdx.x % 32) == __ffs(group) - 1) atomicAdd(&mass[bin], sum);
}

// Radix select of the kth (1-based) largest key among tokens with in(i): returns the key and
// sets *ties_needed to how many tokens equal to that key are taken (in index order).
template <typename In>
__device__ uint32_t SelectKth(Shared& sh, const Row& r, int kth, In in, int* ties_needed) {
  uint32_t prefix = 0, mask = 0;
  int remaining = kth;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < kBins; b += kThreads) sh.count[b] = 0;
    __syncthreads();
    r.ForEach([&](int i, float x) {
      const uint32_t key = ops::SortKey(x);
      BinCount(sh.count, (key & mask) == prefix && in(key, i) ? int((key >> shift) & 0xFF) : -1);
    });
    __syncthreads();
    if (threadIdx.x == 0) {
      int b = kBins - 1;
      for (; b > 0 && sh.count[b] < remaining; --b) remaining -= sh.count[b];
      sh.u = uint32_t(b);
      sh.i = remaining;
    }
    __syncthreads();
    prefix |= sh.u << shift;
    mask |= 0xFFu << shift;
    remaining = sh.i;
    __syncthreads();
  }
  *ties_needed = remaining;
  return prefix;
}

// top-p: the radix walk by probability mass over the top-k set. Sets r.key_p / r.idx_p.
__device__ void SelectTopP(Shared& sh, double* warp_mass, Row& r) {
  uint32_t prefix = 0, mask = 0;
  double cum = 0.0;  // mass of top-k tokens with a key above the current prefix's range
  const double top_p = double(r.p.top_p);
  double* mine = warp_mass + (threadIdx.x / 32) * kBins;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < kWarps * kBins; b += kThreads) warp_mass[b] = 0.0;
    __syncthreads();
    r.ForEach([&](int i, float x) {
      const uint32_t key = ops::SortKey(x);
      const bool in = (key & mask) == prefix && r.InTopK(key, i);
      BinMass(mine, in ? int((key >> shift) & 0xFF) : -1, in ? r.Prob(x) : 0.0);
    });
    __syncthreads();
    for (int b = threadIdx.x; b < kBins; b += kThreads) {  // warps in a fixed order
      double t = 0.0;
      for (int w = 0; w < kWarps; ++w) t += warp_mass[w * kBins + b];
      sh.mass[b] = t;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int b = kBins - 1;
      for (; b >= 0; --b) {
        if (cum + sh.mass[b] >= top_p) break;
        cum += sh.mass[b];
      }
      sh.i = b;  // -1: rounding left the whole range short of top_p
      sh.d = cum;
    }
    __syncthreads();
    const int b = sh.i;
    cum = sh.d;
    __syncthreads();
    if (b < 0) return;  // keep the whole top-k set (the host's "never reached" case)
    prefix |= uint32_t(b) << shift;
    mask |= 0xFFu << shift;
  }
  // Ties at key `prefix`, in index order, each of mass p: take them until cum >= top_p.
  const uint32_t key_p = prefix;
  auto tie = [&](int i, float x) {
    const uint32_t key = ops::SortKey(x);
    return key == key_p && r.InTopK(key, i);
  };
  if (threadIdx.x == 0) sh.i = 0;
  __syncthreads();
  int ntie = 0;
  r.ForEach([&](int i, float x) { ntie += tie(i, x) ? 1 : 0; });
  atomicAdd(&sh.i, ntie);
  __syncthreads();
  ntie = sh.i;
  __syncthreads();
  if (threadIdx.x == 0) {
    const double pm = r.Prob(KeyToFloat(key_p));  // every tie token's prob
    int j = 0;
    while (j < ntie && cum < top_p) cum += pm, ++j;
    sh.i = j < 1 ? 1 : j;
  }
  __syncthreads();
  const int take = sh.i;
  __syncthreads();
  r.key_p = key_p;
  r.idx_p = FindNth(sh, r, take, tie);
}

}  // namespace
}  // namespace pg::cuda
