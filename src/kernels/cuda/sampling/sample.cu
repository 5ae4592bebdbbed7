// ops::Sample on the device: one 1024-thread block per row (a cluster of 2-8 blocks per row
// when the batch leaves SMs idle), the algorithm of kernels/sample_math.h without a sort of
// the vocabulary:
//   * penalties are recomputed on every pass from the row's token_counts (no scratch);
//   * greedy: block argmax (lowest index on ties);
//   * top-k and top-p: one histogram pass over the gap below the max, then only the cut
//     bin's tokens are gathered and sorted in shared memory (sample_cut.cuh); the exact
//     radix walks over the whole row (sample_radix.cuh) remain the fallback;
//   * min-p: a per-token predicate prob >= min_p * prob_top;
//   * draw: each thread owns a contiguous chunk of the vocabulary; chunk sums are scanned
//     (double) and the chunk holding r = u * mass is walked in index order;
//   * with a cluster, its blocks split the first passes (argmax / max, the histogram and the
//     sum of weights) over slices of the row and combine them through distributed shared
//     memory in rank order; the block of rank 0 then finishes the row alone.
// Every weight is exp(double((x - max) * (1/T))) as on the host; prob = weight * (1 / sum). Fixed memory (the row's own
// buffers only), no host synchronisation: graph-capturable. Launched with PDL
// (common/pdl.cuh): it waits before its first read (the rows and logits are upstream outputs).
#include <cooperative_groups.h>

#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/sampling/sample_cut.cuh"
#include "kernels/cuda/sampling/sample_radix.cuh"

namespace pg::cuda {
namespace {

// top-k (k < vocab: on), top-p, min-p, then the draw over the kept set K. r.mx / r.inv_t set.
// Passes over the row: max (before), histogram, then top-k <= kMaxCand: one gather (the
// top-k set and the k-th token's bin), one chunk; top-p alone: one gather (+ chunk sums), one
// chunk; otherwise the sum and draw passes, and the exact walks where a cut falls back.
// [slo, shi): the slice of the row of this block of the row's cluster (rank of cs).
struct Slice {
  int cs = 1, rank = 0, slo = 0, shi = 0;
};

// Blocks of the cluster wait for each other (every thread; shared memory writes before it
// are visible to the other blocks after it).
__device__ void ClusterSync() { cooperative_groups::this_cluster().sync(); }
template <typename T>
__device__ T* Remote(T* p, int rank) { return cooperative_groups::this_cluster().map_shared_rank(p, rank); }

// Returns -1 in blocks of rank > 0 (they only help with the histogram).
__device__ int DrawTruncated(Shared& sh, double* warp_mass, Row& r, int k, double u, const Slice& sl) {
  const bool have_k = k < r.vocab, have_p = r.p.top_p < 1.0f, small_k = have_k && k <= kMaxCand;
  int* hcount = reinterpret_cast<int*>(warp_mass);
  float* hmass = reinterpret_cast<float*>(hcount + kHistBins);
  // Without top-k the histogram pass also sums every weight (the sum top-p needs), so its
  // bins are in nats; with top-k they are in logit units (the temperature does not move the
  // k-th token).
  const bool sum_in_hist = have_p && !have_k;
  if (!have_k && !have_p && sl.rank > 0) return -1;
  if (have_k || have_p) {
    r.bin_scale = have_k ? kBinsPerUnit : kBinsPerUnit * r.inv_t;
    double s = HistPass(r, sl.slo, sl.shi, hcount, hmass, have_p && !small_k, sum_in_hist);
    if (sum_in_hist) s = BlockSum(sh, s);
    if (sl.cs > 1) {  // the row's histogram into rank 0's: each rank adds one range of bins
      if (threadIdx.x == 0) sh.cl_sum = s;
      ClusterSync();
      const int per_rank = kHistBins / sl.cs;
      int* h0 = Remote(hcount, 0);
      float* m0 = Remote(hmass, 0);
      for (int b = sl.rank * per_rank + int(threadIdx.x); b < (sl.rank + 1) * per_rank; b += kThreads) {
        int c = h0[b];
        float m = m0[b];
        for (int q = 1; q < sl.cs; ++q) c += Remote(hcount, q)[b], m += Remote(hmass, q)[b];  // rank order
        h0[b] = c, m0[b] = m;
      }
      if (sl.rank == 0)
        for (int q = 1; q < sl.cs; ++q) s += *Remote(&sh.cl_sum, q);
      ClusterSync();  // rank 0 sees the sums; every block's memory stays until all have read it
      if (sl.rank > 0) return -1;
    }
    if (sum_in_hist) r.SetSum(s);
  }
  const bool cut_k = have_k && CutTopK(sh, r, hcount, k);
  if (have_k && !cut_k) {  // the k-th token's bin is too full
    int ties = 0;
    r.key_k = SelectKth(sh, r, k, [](uint32_t, int) { return true; }, &ties);
    const uint32_t kk = r.key_k;
    r.idx_k = FindNth(sh, r, ties, [&](int, float x) { return ops::SortKey(x) == kk; });
  }
  if (small_k) return DrawSmallTopK(sh, r, u, k, cut_k);
  if (!sum_in_hist) {  // sum of weights over the top-k set (every token without top-k)
    double s = 0.0;
    r.ForEach([&](int i, float x) {
      if (r.InTopK(ops::SortKey(x), i)) s += r.Weight(x);
    });
    r.SetSum(BlockSum(sh, s));
  }
  if (have_p) {
    const int nbins = have_k ? r.Bin(KeyToFloat(r.key_k)) + 1 : kHistBins;
    const int token = DrawTopPHist(sh, r, hcount, hmass, nbins, u);
    if (token >= 0) return token;
    SelectTopP(sh, warp_mass, r);  // the exact walk (the histograms are dead: it reuses them)
  }
  return Draw(sh, r, u, [&](int i, float x) { return KeptProbOf(r, i, x); });
}

__global__ void __launch_bounds__(kThreads) SampleKernel(SampleArgs a) {
  PG_BLOCK_TRACE(kTraceSample);
  __shared__ Shared sh;
  extern __shared__ double warp_mass[];  // kDynamicSmem bytes (sample_row.cuh)
  PdlWait();  // before the first read: rows, logits and counts come from upstream work
  Slice sl;
  sl.cs = a.cluster;
  const int row = int(blockIdx.x) / sl.cs;
  sl.rank = int(blockIdx.x) % sl.cs;  // == the block's rank in its cluster (clusters of cs)
  Row r;
  r.p = a.rows[row];
  r.vocab = a.vocab;
  const int per = ((a.vocab + sl.cs - 1) / sl.cs + 7) / 8 * 8;  // a multiple of 8 (16-byte loads)
  sl.slo = min(a.vocab, sl.rank * per);
  sl.shi = min(a.vocab, sl.slo + per);
  if (a.logits_bf16) r.lb = static_cast<const bf16*>(a.logits) + int64_t(row) * a.ld;
  else r.lf = static_cast<const float*>(a.logits) + int64_t(row) * a.ld;
  int32_t* counts = a.counts && r.p.counts_row >= 0 ? a.counts + int64_t(r.p.counts_row) * a.vocab
                                                    : nullptr;
  r.counts = counts;

  int token = 0;
  if (ops::IsGreedy(r.p)) {
    cub::KeyValuePair<int, float> best(INT_MAX, -INFINITY);
    r.ForEachIn(sl.slo, sl.shi, [&](int i, float x) {  // this thread's tokens in increasing order
      if (x > best.value || best.key == INT_MAX) best = {i, x};  // its first max
    });
    best = cub::BlockReduce<cub::KeyValuePair<int, float>, kThreads>(sh.cub.ra)
               .Reduce(best, ArgMaxOp());
    if (threadIdx.x == 0) sh.cl_best = best;
    if (sl.cs > 1) {
      ClusterSync();
      if (sl.rank == 0 && threadIdx.x == 0)  // slices in index order: ties keep the lowest index
        for (int q = 1; q < sl.cs; ++q) best = ArgMaxOp()(best, *Remote(&sh.cl_best, q));
      ClusterSync();
    }
    if (sl.rank > 0) return;
    if (threadIdx.x == 0) sh.i = best.key;
    __syncthreads();
    token = sh.i;
  } else {
    float mx = -INFINITY;
    r.ForEachIn(sl.slo, sl.shi, [&](int, float x) { mx = fmaxf(mx, x); });
    mx = cub::BlockReduce<float, kThreads>(sh.cub.rf).Reduce(mx, MaxOp());
    if (threadIdx.x == 0) sh.cl_max = mx;
    if (sl.cs > 1) {  // every block needs the row's max (the histogram is relative to it)
      ClusterSync();
      if (threadIdx.x == 0)
        for (int q = 0; q < sl.cs; ++q) mx = fmaxf(mx, *Remote(&sh.cl_max, q));
      ClusterSync();
    }
    if (threadIdx.x == 0) sh.f = mx;
    __syncthreads();
    r.mx = sh.f;
    r.inv_t = 1.0f / r.p.temperature;
    __syncthreads();
    const double u = ops::SampleUniform(ops::RowSeed(r.p), r.p.step);
    const int k = r.p.top_k > 0 && r.p.top_k < r.vocab ? r.p.top_k : r.vocab;
    const bool truncate = k < r.vocab || r.p.top_p < 1.0f || r.p.min_p > 0.0f;
    if (!truncate) {
      if (sl.rank > 0) return;
      token = Draw(sh, r, u, [&](int, float x) { return r.Weight(x); });
    } else {
      token = DrawTruncated(sh, warp_mass, r, k, u, sl);
      if (sl.rank > 0) return;
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
  PdlTrigger();  // the next kernel may launch; it still waits for this one to finish
  if (threadIdx.x == 0) {
    a.tokens[row] = token;
    if (a.update_counts && counts) counts[token] += ops::kCountGeneratedOne;
  }
}

}  // namespace

void LaunchSample(const SampleArgs& a, cudaStream_t stream) {
  if (a.n == 0) return;
  static const bool configured = [] {
    cudaFuncSetAttribute(SampleKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         int(kDynamicSmem));
    return true;
  }();
  (void)configured;
  // Blocks per row: a cluster of up to 8 while the batch leaves SMs idle (the first passes
  // then run on 8 SMs per row), if the device can co-schedule such clusters.
  static const int max_cluster = [] {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(8);
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = kDynamicSmem;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 8, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
    config.attrs = attr;
    config.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, SampleKernel, &config) != cudaSuccess) {
      cudaGetLastError();
      return 1;
    }
    return clusters >= 1 ? 8 : 1;
  }();
  int sms = 0, dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  SampleArgs b = a;
  b.cluster = 1;
  if (a.vocab >= 8192)
    while (b.cluster * 2 <= max_cluster && a.n * b.cluster * 2 <= sms) b.cluster *= 2;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(a.n * b.cluster));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kDynamicSmem;
  config.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = PdlEnabled() ? 1 : 0;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = unsigned(b.cluster), attr[1].val.clusterDim.y = 1;
  attr[1].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 2;
  cudaLaunchKernelEx(&config, SampleKernel, b);
}

}  // namespace pg::cuda
