// Device sampling (sample.cu), part 1: the block's shared state, one row's view of its
// (penalised) logits, and the block-wide building blocks every filter uses: reductions, the
// n-th token of a predicate in index order, and the draw. One 1024-thread block per row.
// Included by sample.cu only (one translation unit; anonymous namespace).
#pragma once

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <cfloat>
#include <climits>
#include <cmath>

#include "kernels/cuda/sampling/sample_params.h"
#include "kernels/sample_math.h"

namespace pg::cuda {
namespace {

using ops::SampleRow;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;  // radix digits of the exact walks (sample_radix.cuh)
// The cut histograms (sample_cut.cuh): kHistBins bins of the gap below the row's max,
// kBinsPerUnit per logit unit (top-k) or per nat (top-p alone); the last bin takes the rest.
constexpr int kHistBins = 8192;
constexpr float kBinsPerUnit = 128.0f;
constexpr int kMaxCand = kThreads;  // tokens a cut's bins may hold to be sorted in shared memory
constexpr int kCandCap = 2 * kThreads;  // sh.cand entries (a small top-k set and its k-th bin)
// Dynamic shared memory: [kWarps, kBins] fp64 top-p mass histograms of the exact walk, or
// (not at the same time) the cut histograms: kHistBins i32 counts then kHistBins f32 masses.
constexpr size_t kDynamicSmem = size_t(kWarps) * kBins * sizeof(double);  // 64 KiB
static_assert(kHistBins * (sizeof(int) + sizeof(float)) <= kDynamicSmem, "histograms fit");
static_assert(kHistBins % kThreads == 0, "each thread scans whole bins");

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

struct ArgMaxOp {
  __device__ cub::KeyValuePair<int, float> operator()(const cub::KeyValuePair<int, float>& a,
                                                      const cub::KeyValuePair<int, float>& b) const {
    if (b.key == INT_MAX) return a;  // an empty thread's placeholder
    if (a.key == INT_MAX) return b;
    if (b.value > a.value || (b.value == a.value && b.key < a.key)) return b;
    return a;
  }
};

struct Shared {
  union {
    cub::BlockReduce<float, kThreads>::TempStorage rf;
    cub::BlockReduce<double, kThreads>::TempStorage rd;
    cub::BlockReduce<cub::KeyValuePair<int, float>, kThreads>::TempStorage ra;
    cub::BlockScan<double, kThreads>::TempStorage sd;
    cub::BlockScan<int, kThreads>::TempStorage si;
    cub::BlockScan<float, kThreads>::TempStorage sf;
  } cub;
  int count[kBins];
  double mass[kBins];
  // Candidates of a cut (sample_cut.cuh): CandKey(key, index), sorted descending = the
  // sampling order (key descending, index ascending).
  unsigned long long cand[kCandCap];
  double chunk[kThreads];  // kept mass of cut candidates per owning chunk (DrawFromChunkSums)
  // Written once per launch for the other blocks of the row's cluster (sample.cu).
  cub::KeyValuePair<int, float> cl_best;
  float cl_max;
  double cl_sum;
  int last;                // largest kept candidate index
  float f;
  double d;
  int i;
  int n;
  uint32_t u;
};

// The row's view: raw logits, penalties, the kept-set cuts.
struct Row {
  const float* lf = nullptr;  // one of lf / lb
  const bf16* lb = nullptr;
  const int32_t* counts = nullptr;
  SampleRow p;
  int vocab = 0;
  float mx = 0.0f, inv_t = 1.0f;
  float bin_scale = kBinsPerUnit;  // cut-histogram bins per unit of (mx - x)
  // token i is in top-k iff key > key_k || (key == key_k && i <= idx_k); same for top-p.
  uint32_t key_k = 0, key_p = 0;
  int idx_k = INT_MAX, idx_p = INT_MAX;
  // sum of weights over top-k, its inverse, the min-p floor on prob (SetSum sets all three)
  double sum_k = 1.0, inv_sum = 1.0, floor = 0.0;

  __device__ float Raw(int i) const { return lf ? lf[i] : __bfloat162float(lb[i]); }
  __device__ float Pen(float l, int i) const {  // the penalised logit of token i
    if (!counts) return l;
    const int32_t c = counts[i];
    return ops::PenalizeLogit(l, ops::CountGenerated(c), ops::CountSeen(c), p);
  }
  __device__ float X(int i) const { return Pen(Raw(i), i); }
  // f(i, X(i)) for i in [lo, hi) in index order; 16-byte loads where the row allows (the
  // kernel is latency bound: one 2-byte load in flight per thread starved it).
  template <typename F>
  __device__ void ForRange(int lo, int hi, F f) const {
    int i = lo;
    if (lb && (reinterpret_cast<uintptr_t>(lb + i) & 15) == 0) {
      for (; i + 8 <= hi; i += 8) {
        const uint4 v = *reinterpret_cast<const uint4*>(lb + i);
        const bf16* e = reinterpret_cast<const bf16*>(&v);
#pragma unroll
        for (int j = 0; j < 8; ++j) f(i + j, Pen(__bfloat162float(e[j]), i + j));
      }
    } else if (lf && (reinterpret_cast<uintptr_t>(lf + i) & 15) == 0) {
      for (; i + 4 <= hi; i += 4) {
        const float4 v = *reinterpret_cast<const float4*>(lf + i);
        f(i, Pen(v.x, i));
        f(i + 1, Pen(v.y, i + 1));
        f(i + 2, Pen(v.z, i + 2));
        f(i + 3, Pen(v.w, i + 3));
      }
    }
    for (; i < hi; ++i) f(i, X(i));
  }
  // f(i, X(i)) over this thread's tokens of [lo, hi) (lo a multiple of 8): groups of 8
  // consecutive ones, block-strided.
  template <typename F>
  __device__ void ForEachIn(int lo, int hi, F f) const {
    for (int base = lo + int(threadIdx.x) * 8; base < hi; base += kThreads * 8)
      ForRange(base, min(base + 8, hi), f);
  }
  template <typename F>
  __device__ void ForEach(F f) const { ForEachIn(0, vocab, f); }
  __device__ double Weight(float x) const { return exp(double((x - mx) * inv_t)); }
  // prob_i = e_i * (1 / sum): a multiply where the host divides (a DDIV per token was the
  // kernel's costliest step; the two differ by at most one rounding of a double).
  __device__ double Prob(float x) const { return Weight(x) * inv_sum; }
  __device__ void SetSum(double s) {
    sum_k = s;
    inv_sum = 1.0 / s;
    floor = double(p.min_p) * inv_sum;  // prob of the top token: exp(0) / sum
  }
  // The cut-histogram bin of a logit: (mx - x) * bin_scale, clamped to the last bin (NaN
  // too). Monotone (non-increasing in x), so every bin holds one contiguous run of the
  // sampling order and equal logits share a bin. _rn: no contraction, the same bin in
  // every pass.
  __device__ int Bin(float x) const {
    const float g = __fmul_rn(__fsub_rn(mx, x), bin_scale);
    return g < float(kHistBins - 1) ? int(g) : kHistBins - 1;
  }
  __device__ bool InTopK(uint32_t key, int i) const {
    return key > key_k || (key == key_k && i <= idx_k);
  }
  __device__ bool InTopP(uint32_t key, int i) const {
    return key > key_p || (key == key_p && i <= idx_p);
  }
  // prob_i of a token in K (top-k, top-p and min-p kept), else 0.
  __device__ double KeptProb(float x, uint32_t key, int i) const {
    if (!InTopK(key, i) || !InTopP(key, i)) return 0.0;
    const double prob = Prob(x);
    return p.min_p <= 0.0f || prob >= floor ? prob : 0.0;
  }
};

// The float of a SortKey (the inverse map; -0 comes back as +0, which weighs the same).
__device__ float KeyToFloat(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key);
}

// Tokens per thread in the chunked (contiguous) passes: a multiple of 8 (16-byte loads).
__device__ int ChunkSize(int vocab) { return (vocab + kThreads * 8 - 1) / (kThreads * 8) * 8; }

// This thread's chunk [lo, hi) of a vocab-wide row in those passes (empty past the vocab).
struct ThreadChunk {
  int lo, hi;
};
__device__ ThreadChunk ChunkOfThread(int vocab) {
  const int c = ChunkSize(vocab), lo = min(vocab, int(threadIdx.x) * c);
  return {lo, min(vocab, lo + c)};
}

// The block-wide sum, returned to every thread (the temp storage is free again on return).
__device__ double BlockSum(Shared& sh, double v) {
  v = cub::BlockReduce<double, kThreads>(sh.cub.rd).Sum(v);
  if (threadIdx.x == 0) sh.d = v;
  __syncthreads();
  v = sh.d;
  __syncthreads();
  return v;
}

// Index of the n-th (1-based) token in index order with pred(i, x) true (n >= 1); -1 if fewer.
template <typename Pred>
__device__ int FindNth(Shared& sh, const Row& r, int n, Pred pred) {
  const auto [lo, hi] = ChunkOfThread(r.vocab);
  int local = 0;
  r.ForRange(lo, hi, [&](int i, float x) { local += pred(i, x) ? 1 : 0; });
  int before = 0;
  if (threadIdx.x == 0) sh.i = -1;
  cub::BlockScan<int, kThreads>(sh.cub.si).ExclusiveSum(local, before);
  __syncthreads();
  if (before < n && before + local >= n) {
    int seen = before, found = -1;
    r.ForRange(lo, hi, [&](int i, float x) {
      if (found < 0 && pred(i, x) && ++seen == n) found = i;
    });
    sh.i = found;
  }
  __syncthreads();
  return sh.i;
}

// The draw, given this thread's `local` = the sum of w over its chunk (ChunkSize tokens from
// threadIdx.x * ChunkSize, index order) and `last` = its largest index with w > 0 (-1: none):
// the chunk holding r = u * mass is walked in index order with w(i, x) (0 outside the set),
// 32 tokens at a time by one warp (running sums by warp scan: the host's sequential
// subtraction up to double rounding).
// Fallback when rounding leaves r beyond the total: the set's largest index.
template <typename W>
__device__ int DrawFromChunkSums(Shared& sh, const Row& r, double u, double local, int last, W w) {
  const int c = ChunkSize(r.vocab);
  double before = 0.0;
  cub::BlockScan<double, kThreads>(sh.cub.sd).ExclusiveSum(local, before);
  __syncthreads();
  const double mass = cub::BlockReduce<double, kThreads>(sh.cub.rd).Sum(local);
  if (threadIdx.x == 0) {
    sh.d = mass;
    sh.i = INT_MAX;
  }
  __syncthreads();
  const double target = u * sh.d;
  if (local > 0.0 && before <= target && target < before + local) atomicMin(&sh.i, int(threadIdx.x));
  __syncthreads();
  const int owner = sh.i;  // the chunk holding the target (the first, if rounding gives two)
  __syncthreads();
  if (owner != INT_MAX && owner == int(threadIdx.x)) sh.d = target - before;
  if (threadIdx.x == 0) sh.i = INT_MAX;
  __syncthreads();
  if (owner != INT_MAX && threadIdx.x < 32) {
    // Warp 0 walks the owner's chunk in rounds of 32 tokens: the first token whose running
    // sum of w (in index order) exceeds the rest of the target.
    const int lane = int(threadIdx.x), olo = min(r.vocab, owner * c), ohi = min(r.vocab, olo + c);
    double rest = sh.d;
    for (int base = olo; base < ohi; base += 32) {
      const int i = base + lane;
      const double wi = i < ohi ? w(i, r.X(i)) : 0.0;
      double run = wi;
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const double o = __shfl_up_sync(0xffffffffu, run, d);
        if (lane >= d) run += o;
      }
      const unsigned hit = __ballot_sync(0xffffffffu, wi > 0.0 && rest - run < 0.0);
      if (hit) {
        if (lane == 0) sh.i = base + __ffs(hit) - 1;
        break;
      }
      rest -= __shfl_sync(0xffffffffu, run, 31);
    }
  }
  __syncthreads();
  int chosen = sh.i;
  __syncthreads();
  if (chosen == INT_MAX) {  // fallback: the largest index of the set
    if (threadIdx.x == 0) sh.i = -1;
    __syncthreads();
    atomicMax(&sh.i, last);
    __syncthreads();
    chosen = sh.i;
  }
  __syncthreads();
  return chosen;
}

// The draw over tokens with weight w(i, x) (0 outside the set) in index order: one pass for
// the chunk sums, then DrawFromChunkSums.
template <typename W>
__device__ int Draw(Shared& sh, const Row& r, double u, W w) {
  const auto [lo, hi] = ChunkOfThread(r.vocab);
  double local = 0.0;
  int last = -1;
  r.ForRange(lo, hi, [&](int i, float x) {
    const double wi = w(i, x);
    if (wi > 0.0) last = i;
    local += wi;
  });
  return DrawFromChunkSums(sh, r, u, local, last, w);
}

}  // namespace
}  // namespace pg::cuda
