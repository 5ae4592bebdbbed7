// Device sampling (sample.cu), part 3: top-k and top-p cuts through one histogram pass.
//
// The sampling order is (x descending, index ascending). A histogram over the gap below the
// row's max, Row::Bin (kHistBins bins, monotone in x), splits that order into contiguous
// runs, one per bin, with equal logits in one bin. So
//   * top-k: the bin holding the k-th token is found from the bin counts; only that bin's
//     tokens (the candidates, <= kMaxCand) are gathered into shared memory and sorted; the
//     (k - tokens in earlier bins)-th of them is the cut;
//   * top-p: with top_k <= kMaxCand the whole top-k set is the candidate set (exact);
//     otherwise fp32 masses per bin locate the bins where the running mass crosses top_p
//     (with a small slack for fp32 rounding), one pass sums the exact (double)
//     probabilities of the tokens in earlier bins and gathers those bins' tokens, and a
//     scan over the sorted candidates finds the first position whose running mass reaches
//     top_p. The fp32 masses only choose the bins: the exact sums verify them (mass before
//     < top_p <= mass through them), else the caller falls back to the exact radix walk
//     (sample_radix.cuh).
// The exact sums add the same per-token doubles as the host (prob_i = e_i / sum) in a
// different order (sample_math.h: the implementations may differ only by that rounding).
#pragma once

#include <type_traits>

#include "kernels/cuda/sampling/sample_row.cuh"

namespace pg::cuda {
namespace {

// A candidate as one 64-bit key whose descending order is the sampling order.
__device__ unsigned long long CandKey(uint32_t key, int i) {
  return (static_cast<unsigned long long>(key) << 32) | static_cast<uint32_t>(~uint32_t(i));
}
__device__ uint32_t CandSortKey(unsigned long long c) { return uint32_t(c >> 32); }
__device__ int CandIndex(unsigned long long c) { return int(~uint32_t(c)); }

// Zeroes the histograms, then counts every token per bin; `mass`: also fp32 weights per bin
// (the double weight rounded when `exact`, else __expf). Returns this thread's double sum of
// weights when `exact` (every token; the caller reduces it), else 0.
__device__ double HistPass(const Row& r, int* hcount, float* hmass, bool mass, bool exact) {
  for (int b = threadIdx.x; b < kHistBins; b += kThreads) hcount[b] = 0, hmass[b] = 0.0f;
  __syncthreads();
  double s = 0.0;
  r.ForEach([&](int, float x) {
    const int b = r.Bin(x);
    atomicAdd(&hcount[b], 1);
    if (exact) {
      const double w = r.Weight(x);
      s += w;
      atomicAdd(&hmass[b], float(w));
    } else if (mass) {
      atomicAdd(&hmass[b], __expf((x - r.mx) * r.inv_t));
    }
  });
  __syncthreads();
  return s;
}

// The first bin b < nbins at which the running total of v reaches goal(total of v[0, nbins))
// (a non-empty bin), or -1; *before = the total of v[0, b) (one thread's running sum).
template <typename T, typename Goal>
__device__ int FirstBinReaching(Shared& sh, const T* v, int nbins, Goal goal, T* before) {
  constexpr int kPer = kHistBins / kThreads;
  const int lo = int(threadIdx.x) * kPer;
  T local = 0;
  for (int j = 0; j < kPer; ++j)
    if (lo + j < nbins) local += v[lo + j];
  T excl = 0, total = 0;
  if constexpr (std::is_same_v<T, int>)
    cub::BlockScan<int, kThreads>(sh.cub.si).ExclusiveSum(local, excl, total);
  else
    cub::BlockScan<float, kThreads>(sh.cub.sf).ExclusiveSum(local, excl, total);
  if (threadIdx.x == 0) sh.i = INT_MAX;
  __syncthreads();
  const T target = goal(total);
  T run = excl;
  for (int j = 0; j < kPer && lo + j < nbins; ++j) {
    const T vj = v[lo + j];
    if (vj > T(0) && run + vj >= target) {
      atomicMin(&sh.i, lo + j);
      break;
    }
    run += vj;
  }
  __syncthreads();
  const int b = sh.i == INT_MAX ? -1 : sh.i;
  if (b >= 0 && int(threadIdx.x) == b / kPer) {
    run = excl;
    for (int j = lo; j < b; ++j) run += v[j];
    if constexpr (std::is_same_v<T, int>) sh.n = int(run);
    else sh.f = float(run);
  }
  __syncthreads();
  if constexpr (std::is_same_v<T, int>) *before = T(sh.n);
  else *before = T(sh.f);
  __syncthreads();
  return b;
}

// Gathers the tokens with in(i, x, key) into sh.cand (unordered; the first kMaxCand of
// them) and returns how many there were. `in` may also accumulate per-thread sums.
template <typename In>
__device__ int Gather(Shared& sh, const Row& r, In in) {
  if (threadIdx.x == 0) sh.n = 0;
  __syncthreads();
  r.ForEach([&](int i, float x) {
    const uint32_t key = ops::SortKey(x);
    if (in(i, x, key)) {
      const int slot = atomicAdd(&sh.n, 1);
      if (slot < kMaxCand) sh.cand[slot] = CandKey(key, i);
    }
  });
  __syncthreads();
  const int n = sh.n;
  __syncthreads();
  return n;
}

// Sorts sh.cand[0, c) descending (bitonic network over the next power of two; padding 0
// sorts last: no real candidate is 0). c <= kMaxCand.
__device__ void SortCandidates(Shared& sh, int c) {
  int n = 1;
  while (n < c) n <<= 1;
  const int t = int(threadIdx.x);
  if (t >= c && t < n) sh.cand[t] = 0;
  __syncthreads();
  for (int k = 2; k <= n; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      const int l = t ^ j;
      if (t < n && l > t) {
        const unsigned long long a = sh.cand[t], b = sh.cand[l];
        if ((t & k) == 0 ? a < b : a > b) sh.cand[t] = b, sh.cand[l] = a;
      }
      __syncthreads();
    }
  }
}

// The top-k cut (r.key_k, r.idx_k) from the bin counts; false (nothing set) when the k-th
// token's bin holds more than kMaxCand tokens. k < vocab.
__device__ bool CutTopK(Shared& sh, Row& r, const int* hcount, int k) {
  int before = 0;
  const int bk = FirstBinReaching(sh, hcount, kHistBins, [k](int) { return k; }, &before);
  const int in_bin = bk < 0 ? INT_MAX : hcount[bk];
  __syncthreads();  // every thread has read the histogram (a fallback may overwrite it)
  if (in_bin > kMaxCand) return false;
  const int c = Gather(sh, r, [&](int, float x, uint32_t) { return r.Bin(x) == bk; });
  SortCandidates(sh, c);
  const unsigned long long cut = sh.cand[k - before - 1];
  r.key_k = CandSortKey(cut);
  r.idx_k = CandIndex(cut);
  __syncthreads();
  return true;
}

// Over sorted candidates sh.cand[0, c) following kept mass `before` (double, prob units):
// the first position whose running mass reaches top_p becomes the top-p cut. False (nothing
// set) when even the last one stays short.
__device__ bool CutTopPInSorted(Shared& sh, Row& r, int c, double before) {
  const int t = int(threadIdx.x);
  const double prob = t < c ? r.Weight(KeyToFloat(CandSortKey(sh.cand[t]))) / r.sum_k : 0.0;
  double run = 0.0;
  cub::BlockScan<double, kThreads>(sh.cub.sd).InclusiveSum(prob, run);
  if (t == 0) sh.i = INT_MAX;
  __syncthreads();
  if (t < c && before + run >= double(r.p.top_p)) atomicMin(&sh.i, t);
  __syncthreads();
  const int at = sh.i;
  if (at != INT_MAX) {
    r.key_p = CandSortKey(sh.cand[at]);
    r.idx_p = CandIndex(sh.cand[at]);
  }
  __syncthreads();
  return at != INT_MAX;
}

// top-p over a top-k set of at most kMaxCand tokens: all of them are the candidates. Never
// fails (a set whose running mass stays short of top_p is kept whole, as on the host).
__device__ void CutTopPSmallK(Shared& sh, Row& r) {
  const int c = Gather(sh, r, [&](int i, float, uint32_t key) { return r.InTopK(key, i); });
  SortCandidates(sh, min(c, kMaxCand));
  CutTopPInSorted(sh, r, min(c, kMaxCand), 0.0);
}

// top-p through the fp32 bin masses of bins [0, nbins) (with top-k: up to the k-th token's
// bin). The cut's bin is where the running fp32 mass reaches top_p * sum_k (the exact sum, in
// the masses' units: weights relative to the max); fp32 rounding is covered by gathering
// every bin whose running mass lies within kMassSlack of that, so the exact check below
// rarely fails. False: use the exact walk.
constexpr double kMassSlack = 1e-5;  // relative
__device__ bool CutTopPHist(Shared& sh, Row& r, const int* hcount, const float* hmass, int nbins) {
  const double goal = double(r.p.top_p) * r.sum_k;
  const float goal_lo = float(goal * (1.0 - kMassSlack)), goal_hi = float(goal * (1.0 + kMassSlack));
  float unused = 0.0f;
  const int lo = FirstBinReaching(sh, hmass, nbins, [goal_lo](float) { return goal_lo; }, &unused);
  int hi = FirstBinReaching(sh, hmass, nbins, [goal_hi](float) { return goal_hi; }, &unused);
  if (hi < 0) hi = nbins - 1;  // the fp32 total stays below goal_hi
  double in_range = 0.0;       // tokens in bins [lo, hi]
  if (lo >= 0)
    for (int b = threadIdx.x; b < kHistBins; b += kThreads) in_range += b >= lo && b <= hi ? hcount[b] : 0;
  in_range = BlockSum(sh, in_range);  // every thread has read the histograms (fallback may overwrite)
  if (lo < 0 || in_range > double(kMaxCand)) return false;
  double head = 0.0;  // this thread's exact probabilities of kept tokens in bins before lo
  const int c = Gather(sh, r, [&](int i, float x, uint32_t key) {
    if (!r.InTopK(key, i)) return false;
    const int b = r.Bin(x);
    if (b < lo) head += r.Weight(x) / r.sum_k;
    return b >= lo && b <= hi;
  });
  head = BlockSum(sh, head);
  if (c > kMaxCand || head >= double(r.p.top_p)) return false;  // the cut lies before lo
  SortCandidates(sh, c);
  return CutTopPInSorted(sh, r, c, head);
}

}  // namespace
}  // namespace pg::cuda
