// KV layout probe (fattn_gpu_check --bench --kv-layout-probe): how fast the decode attention's
// per-kv-head blocks can read their keys under two paged-cache layouts, with nothing but the
// reads (no math, no ring, no PDL), against the device-to-device copy rate of the same run.
//   token-major (the cache's layout, ops.h [pages, page_size, kv_heads, head_dim]): a kv head's
//     row of a token is `row` bytes at token x kv_heads x row + head x row, so one head's block
//     reads `row` bytes of every kv_heads x row;
//   head-major within a page ([pages, kv_heads, page_size, head_dim]): a head's rows of a page
//     are page_size x row contiguous bytes;
//   flat: the same bytes a block as one contiguous range (no page table: the grid's own rate).
// The grid is the cluster plan's: kv_heads x splits blocks of 128 threads, split s of head h
// reads tokens [s T / splits, (s + 1) T / splits) of K and of V; each thread keeps 8 or 32
// (--loads=32) 16-byte loads (ld.global.cg) in flight. Pages are in order or shuffled
// (--shuffle); the caches rotate over >= 1 GiB so that L2 does not hold them (--warm: one copy,
// the same bytes every call, mostly from L2). Session 42's question: the fused kernel's
// loop form reads at ~1.4 TB/s on 64 blocks and two blocks reading the same keys took twice the
// time (docs/PERF.md "Session 42"): is the strided per-head read itself the limit?
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "kernels/cuda/ceilings.h"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/cuda_check.h"

namespace {

constexpr int kThreads = 128;

// Fixed geometry of the probe (Qwen3-30B-A3B's): d 128 bf16 rows, pages of 16 tokens, so the
// address arithmetic below is shifts and one shared-memory page base a token (session 43's first
// probe divided by runtime values and read the page table from global memory a load: its rows
// measured that arithmetic as much as the reads).
constexpr int kRowU4 = 16, kPage = 16, kUnitsPerToken = 2 * kRowU4;  // K row, then V row
constexpr int kMaxBlockPages = 130;  // pages a block's token range may touch (<= 2048 tokens)

enum class Layout : int { kTokenMajor, kHeadMajor, kFlat };
const char* LayoutName(Layout l) {
  return l == Layout::kFlat ? "flat" : l == Layout::kHeadMajor ? "head-major" : "token-major";
}

struct ProbeArgs {
  const uint4* k;        // cache base of this call (rotated)
  const uint4* v;
  const int32_t* pages;  // [tokens / kPage] physical page of each logical page
  int tokens, kv_heads, splits;
  Layout layout;
  uint32_t* sink;        // one word a block (keeps the loads live)
};

// kLoads: independent 16-byte loads a thread keeps in flight. Token-major ([pages, kPage,
// kv_heads, 128]) and head-major ([pages, kv_heads, kPage, 128]) read head h's rows of the
// block's tokens through the page table; flat reads the same number of bytes as one contiguous
// range a block (the rate the grid gets with no layout at all).
template <int kLoads>
__global__ void __launch_bounds__(kThreads) ProbeKernel(const ProbeArgs a) {
  __shared__ int64_t page_base[kMaxBlockPages];  // uint4 offset of (page, head h)'s first row
  const int h = blockIdx.x % a.kv_heads, s = blockIdx.x / a.kv_heads;
  const int t0 = int(int64_t(a.tokens) * s / a.splits), t1 = int(int64_t(a.tokens) * (s + 1) / a.splits);
  const int p0 = t0 / kPage, np = (t1 - 1) / kPage - p0 + 1;
  const int64_t page_u4 = int64_t(kPage) * a.kv_heads * kRowU4;
  const bool head_major = a.layout == Layout::kHeadMajor;
  for (int i = threadIdx.x; i < np; i += kThreads)
    page_base[i] = a.pages[p0 + i] * page_u4 + int64_t(h) * (head_major ? kPage * kRowU4 : kRowU4);
  __syncthreads();
  const int token_stride = head_major ? kRowU4 : a.kv_heads * kRowU4;  // uint4 between tokens
  const int64_t flat0 = int64_t(t0) * a.kv_heads * kRowU4 + int64_t(h) * (t1 - t0) * kRowU4;
  const int units = (t1 - t0) * kUnitsPerToken;
  uint32_t acc = 0;
  for (int base = 0; base < units; base += kThreads * kLoads) {
    uint4 x[kLoads];
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      const int i = base + j * kThreads + int(threadIdx.x);
      x[j] = make_uint4(0, 0, 0, 0);
      if (i < units) {
        const int r = i % kUnitsPerToken, tl = i / kUnitsPerToken;  // tl: token of the block
        const uint4* c = r < kRowU4 ? a.k : a.v;
        const int t = t0 + tl;
        const int64_t row = a.layout == Layout::kFlat
                                ? flat0 + int64_t(tl) * kRowU4
                                : page_base[t / kPage - p0] + int64_t(t % kPage) * token_stride;
        x[j] = __ldcg(c + row + r % kRowU4);
      }
    }
#pragma unroll
    for (int j = 0; j < kLoads; ++j) acc ^= x[j].x ^ x[j].y ^ x[j].z ^ x[j].w;
  }
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  if (threadIdx.x == 0) a.sink[blockIdx.x] = acc;
}

// One thread follows a random cycle through `lines` 256-byte-spaced words (ld.global.cg: L2,
// then HBM): `steps` dependent loads, so the kernel's time / steps is one load's round trip.
__global__ void ChaseKernel(const uint64_t* next, int64_t steps, uint64_t* sink) {
  uint64_t i = 0;
  for (int64_t n = 0; n < steps; ++n) i = __ldcg(next + i);
  *sink = i;
}

}  // namespace

namespace pg::bench {

// The round trip of one dependent load, µs, over a span of `bytes` (32 words a 256-byte line):
// the cycle visits every line once in a random order, and a lap is its first min(lines, 16384)
// steps. `cold`: the first lap after 256 MB of writes flushed L2 (HBM and, for large spans, the
// TLB); `warm`: the median of three later laps, whose <= 16384 lines L2 then holds (session 43's
// first version timed only these and so read 0.14 µs, L2's latency, at every span).
struct ChaseLap {
  double cold, warm;
};
static ChaseLap ChaseRoundTrip(size_t bytes) {
  const size_t words_per_line = 32, lines = bytes / 256, flush_bytes = size_t(256) << 20;
  std::vector<uint64_t> order(lines);
  std::iota(order.begin(), order.end(), uint64_t{0});
  std::shuffle(order.begin() + 1, order.end(), std::mt19937_64(11));
  std::vector<uint64_t> next(lines * words_per_line, 0);
  for (size_t j = 0; j < lines; ++j) next[order[j] * words_per_line] = order[(j + 1) % lines] * words_per_line;
  DeviceBuf d(next.size() * sizeof(uint64_t)), sink(sizeof(uint64_t)), flush(flush_bytes);
  PG_CUDA_CHECK(cudaMemcpy(d.p, next.data(), next.size() * sizeof(uint64_t), cudaMemcpyHostToDevice));
  PG_CUDA_CHECK(cudaMemset(flush.p, 3, flush_bytes));
  const int64_t steps = int64_t(std::min<size_t>(lines, 1 << 14));
  std::vector<float> ms;  // lap 0 cold, laps 1-3 warm
  for (int r = 0; r < 4; ++r)
    ms.push_back(EventMs([&] {
      ChaseKernel<<<1, 1>>>(static_cast<const uint64_t*>(d.p), steps, static_cast<uint64_t*>(sink.p));
      PG_CUDA_CHECK(cudaGetLastError());
    }));
  std::sort(ms.begin() + 1, ms.end());
  return {double(ms[0]) * 1e3 / double(steps), double(ms[2]) * 1e3 / double(steps)};
}

// fattn_gpu_check --bench --kv-layout-probe [--kv-heads=4] [--contexts=4096,8192] [--shuffle]
// [--loads=32] [--warm] [--chase: first, one thread's dependent-load round trip over 4 MB-1 GiB]
int RunKvLayoutProbe(int argc, char** argv) {
  int kv_heads = 4, loads = 8;
  bool shuffle = false, warm = false, chase = false;
  std::vector<int> contexts;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--kv-heads=", 11) == 0) kv_heads = std::atoi(argv[i] + 11);
    if (std::strcmp(argv[i], "--shuffle") == 0) shuffle = true;
    if (std::strcmp(argv[i], "--warm") == 0) warm = true;
    if (std::strcmp(argv[i], "--chase") == 0) chase = true;
    if (std::strncmp(argv[i], "--loads=", 8) == 0) loads = std::atoi(argv[i] + 8) >= 32 ? 32 : 8;
    if (std::strncmp(argv[i], "--contexts=", 11) == 0) contexts = CommaInts(argv[i] + 11);
  }
  if (contexts.empty()) contexts = {4096, 8192, 16384};
  if (chase) {  // one dependent load's round trip, no other traffic
    for (size_t mb : {4, 32, 256, 1024}) {
      const ChaseLap c = ChaseRoundTrip(mb << 20);
      fmt::print("pointer chase over {} MB: first lap (L2 flushed) {:.3f} us a load, later laps {:.3f}\n",
                 mb, c.cold, c.warm);
    }
  }
  if (kv_heads < 1 || kv_heads > 64) {
    fmt::print(stderr, "kv layout probe: --kv-heads must be 1..64\n");
    return 1;
  }
  const int page = kPage, row_bytes = kRowU4 * 16;
  const double bw = cuda::MeasureHbmBytesPerS();
  fmt::print("kv layout probe: {} kv heads, rows of {} bytes, pages of {} tokens ({}), {} loads a "
             "thread in flight, {}; D2D {:.0f} GB/s\n", kv_heads, row_bytes, page,
             shuffle ? "shuffled" : "in order", loads, warm ? "one copy (L2-warm)" : "rotating over 1 GiB",
             bw / 1e9);
  fmt::print("{:>8} {:>7} {:>12} {:>10} {:>8} {:>9}\n", "tokens", "blocks", "layout", "us", "GB/s", "of D2D");
  for (int tokens : contexts) {
    tokens = (tokens + page - 1) / page * page;
    const size_t cache_bytes = size_t(tokens) * kv_heads * row_bytes;  // one of K, V
    const int rot = warm ? 1 : int(std::max<size_t>(1, (size_t(1) << 30) / (2 * cache_bytes) + 1));
    DeviceBuf k(cache_bytes * rot), v(cache_bytes * rot), sink(4096 * sizeof(uint32_t));
    PG_CUDA_CHECK(cudaMemset(k.p, 1, cache_bytes * rot));
    PG_CUDA_CHECK(cudaMemset(v.p, 2, cache_bytes * rot));
    const int npages = tokens / page;
    std::vector<int32_t> order(static_cast<size_t>(npages));
    std::iota(order.begin(), order.end(), 0);
    if (shuffle) std::shuffle(order.begin(), order.end(), std::mt19937(7));
    DeviceBuf pages(order.size() * sizeof(int32_t));
    PG_CUDA_CHECK(cudaMemcpy(pages.p, order.data(), order.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    for (int splits : {16, 32}) {
      const int blocks = kv_heads * splits;
      if (blocks > 4096 || (tokens + splits - 1) / splits > (kMaxBlockPages - 2) * page) continue;
      for (Layout layout : {Layout::kTokenMajor, Layout::kHeadMajor, Layout::kFlat}) {
        auto call = [&](int i) {
          const size_t off = size_t(i % rot) * cache_bytes / 16;
          const ProbeArgs a{static_cast<const uint4*>(k.p) + off, static_cast<const uint4*>(v.p) + off,
                            static_cast<const int32_t*>(pages.p), tokens, kv_heads, splits, layout,
                            static_cast<uint32_t*>(sink.p)};
          if (loads == 32) ProbeKernel<32><<<blocks, kThreads, 0, cuda::CurrentStream()>>>(a);
          else ProbeKernel<8><<<blocks, kThreads, 0, cuda::CurrentStream()>>>(a);
          PG_CUDA_CHECK(cudaGetLastError());
        };
        const double ms = GraphMedianMs(call);
        const double bytes = 2.0 * double(cache_bytes);
        fmt::print("{:>8} {:>7} {:>12} {:>10.2f} {:>8.0f} {:>8.0f}%\n", tokens, blocks,
                   LayoutName(layout), ms * 1e3, bytes / (ms * 1e-3) / 1e9,
                   100.0 * bytes / (ms * 1e-3) / bw);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace pg::bench
