// Device sampling (sample.cu), part 3: top-k and top-p cuts through one histogram pass.
//
// The sampling order is (x descending, index ascending). A histogram over the gap below the
// row's max, Row::Bin (kHistBins bins, monotone in x), splits that order into contiguous
// runs, one per bin, with equal logits in one bin. So
//   * top-k: the bin holding the k-th token is found from the bin counts; only that bin's
//     tokens (the candidates, <= kMaxCand) are gathered into shared memory and sorted; the
//     (k - tokens in earlier bins)-th of them is the cut;
//   * top-k <= kMaxCand: the whole top-k set is then gathered and sorted: its sum, the top-p
//     cut and the draw's chunk sums come from it (DrawSmallTopK);
//   * top-p otherwise:
//     fp32 masses per bin locate the bins where the running mass crosses top_p
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

// Zeroes the histograms, then counts the tokens of [lo, hi) per bin; `mass`: also fp32
// weights per bin (the double weight rounded when `exact`, else __expf). Returns this
// thread's double sum of weights when `exact` (the caller reduces it), else 0.
__device__ double HistPass(const Row& r, int lo, int hi, int* hcount, float* hmass, bool mass,
                           bool exact) {
  for (int b = threadIdx.x; b < kHistBins; b += kThreads) hcount[b] = 0, hmass[b] = 0.0f;
  __syncthreads();
  double s = 0.0;
  r.ForEachIn(lo, hi, [&](int, float x) {
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

// Gathers the tokens with in(i, x, key) into sh.cand (unordered; the first kCandCap of
// them) and returns how many there were. `in` may also accumulate per-thread sums.
template <typename In>
__device__ int Gather(Shared& sh, const Row& r, In in) {
  if (threadIdx.x == 0) sh.n = 0;
  __syncthreads();
  r.ForEach([&](int i, float x) {
    const uint32_t key = ops::SortKey(x);
    if (in(i, x, key)) {
      const int slot = atomicAdd(&sh.n, 1);
      if (slot < kCandCap) sh.cand[slot] = CandKey(key, i);
    }
  });
  __syncthreads();
  const int n = sh.n;
  __syncthreads();
  return n;
}

// Sorts sh.cand[0, c) descending (bitonic network over the next power of two; padding 0
// sorts last: no real candidate is 0). c <= kCandCap; each thread owns entries t, t + kThreads.
__device__ void SortCandidates(Shared& sh, int c) {
  int n = 1;
  while (n < c) n <<= 1;
  for (int e = int(threadIdx.x); e < n; e += kThreads)
    if (e >= c) sh.cand[e] = 0;
  __syncthreads();
  for (int k = 2; k <= n; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int e = int(threadIdx.x); e < n; e += kThreads) {
        const int l = e ^ j;
        if (l > e) {  // each pair once, by its lower entry's thread
          const unsigned long long a = sh.cand[e], b = sh.cand[l];
          if ((e & k) == 0 ? a < b : a > b) sh.cand[e] = b, sh.cand[l] = a;
        }
      }
      __syncthreads();
    }
  }
}

// The top-k cut (r.key_k, r.idx_k) from the bin counts; false (nothing set) when the k-th
// token's bin holds more than kMaxCand tokens. k < vocab. With k <= kMaxCand the tokens of
// the earlier bins are gathered too, so sh.cand[0, k) is then the whole top-k set, sorted.
__device__ bool CutTopK(Shared& sh, Row& r, const int* hcount, int k) {
  int before = 0;
  const int bk = FirstBinReaching(sh, hcount, kHistBins, [k](int) { return k; }, &before);
  const int in_bin = bk < 0 ? INT_MAX : hcount[bk];
  __syncthreads();  // every thread has read the histogram (a fallback may overwrite it)
  if (in_bin > kMaxCand) return false;
  const bool whole = k <= kMaxCand;  // before < k: at most kCandCap tokens in bins <= bk
  const int c = Gather(sh, r, [&](int, float x, uint32_t) {
    const int b = r.Bin(x);
    return whole ? b <= bk : b == bk;
  });
  SortCandidates(sh, min(c, kCandCap));
  const unsigned long long cut = sh.cand[whole ? k - 1 : k - before - 1];
  r.key_k = CandSortKey(cut);
  r.idx_k = CandIndex(cut);
  __syncthreads();
  return true;
}

// Over sorted candidates sh.cand[0, c) following kept mass `before` (double, prob units):
// the first position whose running mass reaches top_p becomes the top-p cut (r.key_p,
// r.idx_p) and is returned; -1 (nothing set) when even the last one stays short.
__device__ int CutTopPAt(Shared& sh, Row& r, int c, double before) {
  const int t = int(threadIdx.x);
  const double prob = t < c ? r.Prob(KeyToFloat(CandSortKey(sh.cand[t]))) : 0.0;
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
  return at == INT_MAX ? -1 : at;
}

// The kept prefix sh.cand[0, n) of sorted candidates into the draw's chunk sums: sh.chunk[o]
// = the probabilities (passing min-p) of those owned by chunk o; sh.last = their largest index.
__device__ void ChunkSumsOfCandidates(Shared& sh, const Row& r, int n) {
  const int t = int(threadIdx.x);
  sh.chunk[t] = 0.0;
  if (t == 0) sh.last = -1;
  __syncthreads();
  if (t < n) {
    const unsigned long long cd = sh.cand[t];
    const int i = CandIndex(cd);
    const double prob = r.Prob(KeyToFloat(CandSortKey(cd)));
    if (r.p.min_p <= 0.0f || prob >= r.floor) {
      atomicAdd(&sh.chunk[i / ChunkSize(r.vocab)], prob);
      atomicMax(&sh.last, i);
    }
  }
  __syncthreads();
}

__device__ double KeptProbOf(const Row& r, int i, float x) { return r.KeptProb(x, ops::SortKey(x), i); }

// top-k of at most kMaxCand tokens (cut set), then top-p, min-p and the draw, all on the
// sorted top-k set: its sum, the top-p cut and the draw's chunk sums come from it (the draw
// walks one chunk of the row).
// gathered: sh.cand[0, k) already holds the top-k set, sorted (CutTopK); else one gather pass.
__device__ int DrawSmallTopK(Shared& sh, Row& r, double u, int k, bool gathered) {
  if (!gathered) {
    Gather(sh, r, [&](int i, float, uint32_t key) { return r.InTopK(key, i); });  // k tokens
    SortCandidates(sh, k);
  }
  const int c = k, t = int(threadIdx.x);
  r.SetSum(BlockSum(sh, t < c ? r.Weight(KeyToFloat(CandSortKey(sh.cand[t]))) : 0.0));
  int kept = c;
  if (r.p.top_p < 1.0f) {  // a set whose running mass stays short of top_p is kept whole
    const int at = CutTopPAt(sh, r, c, 0.0);
    if (at >= 0) kept = at + 1;
  }
  ChunkSumsOfCandidates(sh, r, kept);
  return DrawFromChunkSums(sh, r, u, sh.chunk[t], sh.last,
                           [&](int i, float x) { return KeptProbOf(r, i, x); });
}

// top-p through the fp32 bin masses of bins [0, nbins) (with top-k: up to the k-th token's
// bin), then the draw. The cut's bin is where the running fp32 mass reaches top_p * sum_k (the
// exact sum, in the masses' units: weights relative to the max); fp32 rounding is covered by
// gathering every bin whose running mass lies within kMassSlack of that. One pass over the
// row (each thread its draw chunk) sums the exact probabilities before those bins (and, past
// min-p, the draw's chunk sums) and gathers their tokens; the sorted candidates give the cut.
// r.SetSum was called. Returns the token, or -1 (the row's cuts untouched: use the
// exact walk) when the fp32 masses chose wrong or the bins hold too many tokens.
constexpr double kMassSlack = 1e-5;  // relative
__device__ int DrawTopPHist(Shared& sh, Row& r, const int* hcount, const float* hmass, int nbins,
                            double u) {
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
  if (lo < 0 || in_range > double(kMaxCand)) return -1;
  const int t = int(threadIdx.x);
  const auto [clo, chi] = ChunkOfThread(r.vocab);
  double head = 0.0, local = 0.0;  // this chunk's kept probabilities before lo (all; past min-p)
  int last = -1;
  if (t == 0) sh.n = 0;
  __syncthreads();
  r.ForRange(clo, chi, [&](int i, float x) {
    const uint32_t key = ops::SortKey(x);
    if (!r.InTopK(key, i)) return;
    const int b = r.Bin(x);
    if (b < lo) {
      const double prob = r.Prob(x);
      head += prob;
      if (r.p.min_p <= 0.0f || prob >= r.floor) local += prob, last = i;
    } else if (b <= hi) {
      const int slot = atomicAdd(&sh.n, 1);
      if (slot < kMaxCand) sh.cand[slot] = CandKey(key, i);
    }
  });
  __syncthreads();
  const int c = sh.n;
  __syncthreads();
  head = BlockSum(sh, head);
  if (c > kMaxCand || head >= double(r.p.top_p)) return -1;  // the cut lies before lo
  SortCandidates(sh, c);
  const int at = CutTopPAt(sh, r, c, head);
  if (at < 0) return -1;
  ChunkSumsOfCandidates(sh, r, at + 1);
  local += sh.chunk[t];
  last = max(last, sh.last);
  return DrawFromChunkSums(sh, r, u, local, last, [&](int i, float x) { return KeptProbOf(r, i, x); });
}

}  // namespace
}  // namespace pg::cuda
