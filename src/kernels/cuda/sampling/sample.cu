// ops::Sample on the device: one 1024-thread block per row, the algorithm of
// kernels/sample_math.h without a sort:
//   * penalties are recomputed on every pass from the row's token_counts (no scratch);
//   * greedy: block argmax (lowest index on ties);
//   * top-k: radix select (4 passes of 8-bit digits) of the k-th largest SortKey, then the
//     ties at the cut are taken in index order;
//   * top-p: the same radix walk over the kept set weighted by probability mass (double,
//     shared-memory atomics), then the ties at the cut one by one, as the host adds them;
//   * min-p: a per-token predicate prob >= min_p * prob_top;
//   * draw: each thread owns a contiguous chunk of the vocabulary; chunk sums are scanned
//     (double) and the chunk holding r = u * mass is walked in index order.
// Every weight is exp(double((x - max) * (1/T))) as on the host. Fixed memory (the row's own
// buffers only), no host synchronisation: graph-capturable.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <cfloat>
#include <cmath>
#include <climits>

#include "kernels/cuda/sampling/sample_params.h"
#include "kernels/sample_math.h"

namespace pg::cuda {
namespace {

using ops::SampleRow;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;

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
  } cub;
  int count[kBins];
  double mass[kBins];
  float f;
  double d;
  int i;
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
  // token i is in top-k iff key > key_k || (key == key_k && i <= idx_k); same for top-p.
  uint32_t key_k = 0, key_p = 0;
  int idx_k = INT_MAX, idx_p = INT_MAX;
  double sum_k = 1.0, floor = 0.0;  // sum of weights over top-k; min-p floor on prob

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
  // f(i, X(i)) over this thread's tokens: groups of 8 consecutive ones, block-strided.
  template <typename F>
  __device__ void ForEach(F f) const {
    for (int base = int(threadIdx.x) * 8; base < vocab; base += kThreads * 8)
      ForRange(base, min(base + 8, vocab), f);
  }
  __device__ double Weight(float x) const { return exp(double((x - mx) * inv_t)); }
  __device__ bool InTopK(uint32_t key, int i) const {
    return key > key_k || (key == key_k && i <= idx_k);
  }
  // prob_i of a token in K (top-k, top-p and min-p kept), else 0.
  __device__ double KeptProb(float x, uint32_t key, int i) const {
    if (!InTopK(key, i) || !(key > key_p || (key == key_p && i <= idx_p))) return 0.0;
    const double prob = Weight(x) / sum_k;
    return p.min_p <= 0.0f || prob >= floor ? prob : 0.0;
  }
};

// The float of a SortKey (the inverse map; -0 comes back as +0, which weighs the same).
__device__ float KeyToFloat(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key);
}

// Tokens per thread in the chunked (contiguous) passes: a multiple of 8 (16-byte loads).
__device__ int ChunkSize(int vocab) { return (vocab + kThreads * 8 - 1) / (kThreads * 8) * 8; }

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

// Index of the n-th (1-based) token in index order with pred(i, x) true (n >= 1); -1 if fewer.
template <typename Pred>
__device__ int FindNth(Shared& sh, const Row& r, int n, Pred pred) {
  const int c = ChunkSize(r.vocab), lo = min(r.vocab, int(threadIdx.x) * c),
            hi = min(r.vocab, lo + c);
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
      BinMass(mine, in ? int((key >> shift) & 0xFF) : -1, in ? r.Weight(x) / r.sum_k : 0.0);
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
    const double pm = r.Weight(KeyToFloat(key_p)) / r.sum_k;  // every tie token's prob
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

// The draw over tokens with weight w(i, x) (0 outside the set) in index order; `last`: the
// fallback when rounding leaves r beyond the total (the set's largest index).
template <typename W>
__device__ int Draw(Shared& sh, const Row& r, double u, W w) {
  const int c = ChunkSize(r.vocab), lo = min(r.vocab, int(threadIdx.x) * c),
            hi = min(r.vocab, lo + c);
  double local = 0.0;
  int last = -1;
  r.ForRange(lo, hi, [&](int i, float x) {
    const double wi = w(i, x);
    if (wi > 0.0) last = i;
    local += wi;
  });
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
  if (local > 0.0 && before <= target && target < before + local) {
    double rest = target - before;
    int found = -1;
    r.ForRange(lo, hi, [&](int i, float x) {
      if (found >= 0) return;
      rest -= w(i, x);
      if (rest < 0.0) found = i;
    });
    if (found >= 0) atomicMin(&sh.i, found);
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
  return chosen;
}

__global__ void __launch_bounds__(kThreads) SampleKernel(SampleArgs a) {
  __shared__ Shared sh;
  extern __shared__ double warp_mass[];  // [kWarps, kBins] top-p mass histograms
  const int row = blockIdx.x;
  Row r;
  r.p = a.rows[row];
  r.vocab = a.vocab;
  if (a.logits_bf16) r.lb = static_cast<const bf16*>(a.logits) + int64_t(row) * a.ld;
  else r.lf = static_cast<const float*>(a.logits) + int64_t(row) * a.ld;
  int32_t* counts = a.counts && r.p.counts_row >= 0 ? a.counts + int64_t(r.p.counts_row) * a.vocab
                                                    : nullptr;
  r.counts = counts;

  int token = 0;
  if (ops::IsGreedy(r.p)) {
    cub::KeyValuePair<int, float> best(INT_MAX, -INFINITY);
    r.ForEach([&](int i, float x) {  // this thread's tokens in increasing order
      if (x > best.value || best.key == INT_MAX) best = {i, x};  // its first max
    });
    best = cub::BlockReduce<cub::KeyValuePair<int, float>, kThreads>(sh.cub.ra)
               .Reduce(best, ArgMaxOp());
    if (threadIdx.x == 0) sh.i = best.key;
    __syncthreads();
    token = sh.i;
  } else {
    float mx = -INFINITY;
    r.ForEach([&](int, float x) { mx = fmaxf(mx, x); });
    mx = cub::BlockReduce<float, kThreads>(sh.cub.rf).Reduce(mx, MaxOp());
    if (threadIdx.x == 0) sh.f = mx;
    __syncthreads();
    r.mx = sh.f;
    r.inv_t = 1.0f / r.p.temperature;
    __syncthreads();
    const double u = ops::SampleUniform(ops::RowSeed(r.p), r.p.step);
    const int k = r.p.top_k > 0 && r.p.top_k < r.vocab ? r.p.top_k : r.vocab;
    const bool truncate = k < r.vocab || r.p.top_p < 1.0f || r.p.min_p > 0.0f;
    if (!truncate) {
      token = Draw(sh, r, u, [&](int, float x) { return r.Weight(x); });
    } else {
      if (k < r.vocab) {
        int ties = 0;
        r.key_k = SelectKth(sh, r, k, [](uint32_t, int) { return true; }, &ties);
        const uint32_t kk = r.key_k;
        r.idx_k = FindNth(sh, r, ties, [&](int, float x) { return ops::SortKey(x) == kk; });
      }
      double s = 0.0;
      r.ForEach([&](int i, float x) {
        if (r.InTopK(ops::SortKey(x), i)) s += r.Weight(x);
      });
      s = cub::BlockReduce<double, kThreads>(sh.cub.rd).Sum(s);
      if (threadIdx.x == 0) sh.d = s;
      __syncthreads();
      r.sum_k = sh.d;
      __syncthreads();
      if (r.p.top_p < 1.0f) SelectTopP(sh, warp_mass, r);
      r.floor = double(r.p.min_p) * (1.0 / r.sum_k);  // prob of the top token: exp(0) / sum
      token = Draw(sh, r, u, [&](int i, float x) { return r.KeptProb(x, ops::SortKey(x), i); });
    }
  }

  if (a.logprobs) {  // log_softmax of the raw logits at the token (host: LogSoftmax)
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < r.vocab; i += kThreads) mx = fmaxf(mx, r.Raw(i));
    mx = cub::BlockReduce<float, kThreads>(sh.cub.rf).Reduce(mx, MaxOp());
    if (threadIdx.x == 0) sh.f = mx;
    __syncthreads();
    mx = sh.f;
    double s = 0.0;
    for (int i = threadIdx.x; i < r.vocab; i += kThreads) s += exp(double(r.Raw(i) - mx));
    s = cub::BlockReduce<double, kThreads>(sh.cub.rd).Sum(s);
    if (threadIdx.x == 0) a.logprobs[row] = r.Raw(token) - (mx + float(log(s)));
  }
  if (threadIdx.x == 0) {
    a.tokens[row] = token;
    if (a.update_counts && counts) counts[token] += ops::kCountGeneratedOne;
  }
}

}  // namespace

void LaunchSample(const SampleArgs& a, cudaStream_t stream) {
  if (a.n == 0) return;
  constexpr size_t kDynamicSmem = size_t(kWarps) * kBins * sizeof(double);  // 64 KiB
  static const bool configured = [] {
    cudaFuncSetAttribute(SampleKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         int(kDynamicSmem));
    return true;
  }();
  (void)configured;
  SampleKernel<<<unsigned(a.n), kThreads, kDynamicSmem, stream>>>(a);
}

}  // namespace pg::cuda
