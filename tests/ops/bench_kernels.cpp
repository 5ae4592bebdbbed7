// Kernel microbenchmark (a plain executable, not a test).
//  1. memcpy bandwidth of a buffer far larger than the caches (the floor for GEMV).
//  2. Decode GEMV (n = 1) on the SmolLM2-135M shapes, per capable Matmul backend: GB/s of
//     weight bytes read, "hot" (one weight, cache-resident when small) and "cold" (cycling
//     through copies totalling > 256 MiB, so every call streams from DRAM).
//     "cpu ns/blk": process CPU time per 32-weight block, hot; with 1 thread this is the
//     kernel's own cost and does not depend on other load on the machine (run `bench_kernels 1`
//     on a shared machine; wall-clock columns there measure the load, not the kernel).
//  3. Prefill-size Matmul (n = 16 and 128) per capable backend, in GFLOP/s, on the source
//     weights and (where made) their RepackRows4 copy.
// Usage: bench_kernels [threads [all|decode|prefill]]   (default: hardware threads, all)
#include <time.h>

#include <atomic>
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/quant.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/registry.h"

namespace {

using namespace pg;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Runs fn repeatedly for at least min_s seconds; returns seconds per call.
template <typename F>
double TimeIt(F&& fn, double min_s = 0.3) {
  fn();  // warm-up
  int iters = 0;
  auto t0 = Clock::now();
  double el = 0;
  do {
    fn();
    ++iters;
    el = Seconds(t0, Clock::now());
  } while (el < min_s);
  return el / iters;
}

// Process CPU seconds per call of fn (all threads of the process).
template <typename F>
double CpuTimeIt(F&& fn, double min_s = 0.3) {
  auto cpu_now = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  };
  fn();
  int iters = 0;
  const double t0 = cpu_now();
  double el = 0;
  do {
    fn();
    ++iters;
    el = cpu_now() - t0;
  } while (el < min_s);
  return el / iters;
}

double MemcpyGBs() {
  const size_t bytes = size_t(512) << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double s = TimeIt([&] { std::memcpy(b.data(), a.data(), bytes); a[0] ^= b[1]; }, 1.0);
  return double(bytes) / s / 1e9;  // bytes copied (each read once and written once) per s
}

// Streaming read bandwidth over 512 MiB on the pool's threads (what decode's weight reads can
// reach; memcpy also writes and write-allocates): 256-bit loads summed with a software
// prefetch 4 KiB ahead (as the GEMV kernels do), each thread a contiguous range.
PG_TARGET_AVX2 uint64_t SumRange(const uint64_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(p + i + 512), _MM_HINT_T0);  // 4 KiB ahead
    _mm_prefetch(reinterpret_cast<const char*>(p + i + 520), _MM_HINT_T0);
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  const __m256i a = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  uint64_t lanes[4];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), a);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

double ReadGBs() {
  const size_t words = (size_t(512) << 20) / 8;
  std::vector<uint64_t> a(words, 1);
  std::atomic<uint64_t> sink{0};
  const int64_t parts = ThreadPool::Default().num_threads();
  double s = TimeIt([&] {
    ThreadPool::Default().ParallelFor(parts, [&](int64_t p0, int64_t p1) {
      for (int64_t part = p0; part < p1; ++part) {
        const size_t b = words * size_t(part) / size_t(parts), e = words * size_t(part + 1) / size_t(parts);
        sink += SumRange(a.data() + b, e - b);
      }
    });
  }, 1.0);
  return double(words * 8) / s / 1e9;
}

Tensor RandomWeight(DType dt, int64_t m, int64_t k, std::mt19937& rng) {
  Tensor w(dt, {m, k});
  std::normal_distribution<float> nd;
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t j = 0; j < m; ++j) {
    for (float& v : row) v = nd(rng);
    quant::QuantizeRow(dt, row.data(), w.view().row_ptr(j), k);
  }
  return w;
}

using MatmulTable = std::remove_cvref_t<decltype(ops::Registry::Global().table<ops::MatmulParams>())>;

// Section 1 and 2: bandwidth floors, then decode GEMV per backend.
void BenchDecode(const MatmulTable& table, std::mt19937& rng) {
  const double mem = MemcpyGBs();
  std::printf("memcpy (512 MiB): %.2f GB/s copied (%.2f GB/s read+write)\n", mem, 2 * mem);
  std::printf("read (512 MiB, %d threads): %.2f GB/s\n\n", ThreadPool::Default().num_threads(),
              ReadGBs());

  struct Shape { const char* name; int64_t m, k; DType dt; };
  const Shape shapes[] = {{"attn q/o 576x576", 576, 576, DType::kQ4_1},
                          {"attn k/v 192x576", 192, 576, DType::kQ4_1},
                          {"mlp gate/up 1536x576", 1536, 576, DType::kQ4_1},
                          {"mlp down 576x1536", 576, 1536, DType::kQ4_1},
                          {"logits 49152x576", 49152, 576, DType::kQ8_0},
                          // Qwen3-30B-A3B's experts and a q4_0 GGUF's attention (llama.cpp files)
                          {"expert gate/up 768x2048", 768, 2048, DType::kQ4_0},
                          {"expert down 2048x768", 2048, 768, DType::kQ4_0},
                          {"attn q 4096x2048", 4096, 2048, DType::kQ4_0}};
  std::printf("decode GEMV, n=1: GB/s of weight bytes (hot = same weight; cold = streamed)\n");
  std::printf("%-24s %-6s %-16s %10s %10s %10s %8s %10s\n", "shape", "dtype", "backend",
              "us/call", "hot GB/s", "cold GB/s", "cold/memcpy", "cpu ns/blk");
  for (const Shape& s : shapes) {
    const int64_t wbytes = s.m * s.k / Info(s.dt).block_size * Info(s.dt).block_bytes;
    const int copies = int(std::max<int64_t>(1, (int64_t(256) << 20) / wbytes));
    std::vector<Tensor> ws;
    for (int c = 0; c < copies; ++c) ws.push_back(RandomWeight(s.dt, s.m, s.k, rng));
    Tensor x(DType::kF32, {1, s.k}), out(DType::kF32, {1, s.m});
    std::normal_distribution<float> nd;
    for (int64_t i = 0; i < s.k; ++i) x.data<float>()[i] = nd(rng);
    // One line per backend that reads the weights `set` (copies of one matrix).
    auto bench = [&](const std::vector<Tensor>& set) {
      for (const auto& impl : table.all()) {
        ops::MatmulParams p{x.view(), set[0].view(), out.view(), {}, {}, false};
        if (impl.backend == "ref" || (impl.supports && !impl.supports(p))) continue;
        const double hot = TimeIt([&] { ops::RunWith(impl, p); });
        int c = 0;
        const double cold = TimeIt([&] {
          p.w = set[size_t(c)].view();
          c = (c + 1) % copies;
          ops::RunWith(impl, p);
        });
        p.w = set[0].view();
        const double cpu = CpuTimeIt([&] { ops::RunWith(impl, p); });
        std::printf("%-24s %-6s %-16s %10.1f %10.2f %10.2f %8.2f %10.2f\n", s.name,
                    std::string(Name(p.w.dtype)).c_str(), impl.backend.c_str(), cold * 1e6,
                    double(wbytes) / hot / 1e9, double(wbytes) / cold / 1e9,
                    double(wbytes) / cold / 1e9 / mem, cpu * 1e9 / double(s.m * s.k / 32));
      }
    };
    bench(ws);
    if (ops::cpu::CanRepackRows4(ws[0].view())) {  // the interleaved copy
      std::vector<Tensor> w4;
      for (const Tensor& w : ws) w4.push_back(ops::cpu::RepackRows4(w.view()));
      bench(w4);
    }
  }
}

// Section 3: prefill-size Matmul per backend.
void BenchPrefill(const MatmulTable& table, std::mt19937& rng) {
  std::printf("\nprefill Matmul: GFLOP/s per backend (cpu: process CPU us per call)\n");
  struct P { int64_t m, k; DType dt; };
  for (const P& s : {P{1536, 576, DType::kQ4_1}, P{768, 2048, DType::kQ4_0}}) {
    Tensor w = RandomWeight(s.dt, s.m, s.k, rng);
    std::vector<Tensor> forms;
    if (ops::cpu::CanRepackRows4(w.view())) forms.push_back(ops::cpu::RepackRows4(w.view()));
    forms.push_back(std::move(w));
    for (const Tensor& wf : forms)
      for (int64_t n : {16, 128}) {
        Tensor x(DType::kF32, {n, s.k}), out(DType::kF32, {n, s.m});
        std::normal_distribution<float> nd;
        for (int64_t i = 0; i < n * s.k; ++i) x.data<float>()[i] = nd(rng);
        ops::MatmulParams p{x.view(), wf.view(), out.view(), {}, {}, false};
        for (const auto& impl : table.all()) {
          if (impl.backend == "ref" || (impl.supports && !impl.supports(p))) continue;
          const double t = TimeIt([&] { ops::RunWith(impl, p); });
          const double cpu = CpuTimeIt([&] { ops::RunWith(impl, p); });
          std::printf("  %4ldx%-5ld %-6s n=%-4ld %-16s %8.1f us %8.1f GFLOP/s %8.1f cpu us\n",
                      long(s.m), long(s.k), std::string(Name(wf.dtype())).c_str(), long(n),
                      impl.backend.c_str(), t * 1e6, 2.0 * double(n * s.m * s.k) / t / 1e9,
                      cpu * 1e6);
        }
      }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) ThreadPool::SetDefaultThreads(std::atoi(argv[1]));
  const std::string section = argc > 2 ? argv[2] : "all";  // all | decode | prefill
  std::mt19937 rng(42);
  const auto& table = ops::Registry::Global().table<ops::MatmulParams>();
  std::printf("threads: %d\n", ThreadPool::Default().num_threads());
  if (section == "all" || section == "decode") BenchDecode(table, rng);
  if (section == "all" || section == "prefill") BenchPrefill(table, rng);
  return 0;
}
