// Benchmark of issue 6's device sampling and fp8 weights (one H200 run; no arguments):
//  1. ceilings measured in this run: HBM bandwidth (device-to-device copy), bf16 GEMM rate,
//     fp8 GEMM rate (cuBLASLt e4m3 8192^3, per-tensor scales);
//  2. ops::Sample per step at batch 1 / 8 / 128 for a 128256 vocab (bf16 logits), by filter,
//     beside the read-back it replaces (bf16 logits device -> pinned host); with
//     sampling_only, this alone for vocab 128256 and 151936 (Qwen);
//  3. fp8 e4m3 Matmul (registry dispatch: GEMV for <= 4 rows, cuBLASLt above) on
//     Llama-3.1-8B shapes at batch 1 / 8 / 32 / 128 against
//     floor = max(weight bytes at 1 B/weight / bandwidth, FLOPs / fp8 GEMM rate).
// Times are per call from CUDA-graph replay (bench_timing.h). Weights rotate over > 256 MiB.
// Run by the bench_sample binary, and by test_ops as BenchSample.DISABLED_Run (one binary
// fewer to carry to the GPU machine).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "bench_sample.h"
#include "bench_timing.h"
#include "kernels/cuda/ceilings.h"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/fill.h"
#include "kernels/cuda/gemm/fp8_matmul.h"
#include "kernels/cuda/gemm/matmul_lt.h"
#include "kernels/cuda/moe/moe_params.h"
#include "kernels/ops.h"
#include "kernels/ops_sample.h"

namespace pg::bench {
void FillBf16(void* p, int64_t n, uint32_t seed, float scale);
}

namespace {

using namespace pg;

struct Buf {
  void* p = nullptr;
  explicit Buf(size_t bytes) {
    PG_CUDA_CHECK(cudaMalloc(&p, bytes));
    PG_CUDA_CHECK(cudaMemset(p, 0, bytes));
  }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

TensorView Dev(void* p, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::Contiguous(p, t, shape, Device::kCuda);
}

// The fp8 GEMM rate through cuBLASLt; 0 when it offers no algorithm (the caller then says so).
double Fp8GemmFlopsPerS(int64_t size) {
  Buf x(size_t(size * size)), w(size_t(size * size)), out(size_t(size * size * 2)), xs(4), ws(4);
  cuda::LaunchFillRandom({x.p, size * size, false, 0.0f, 16.0f, 1, true}, 0);
  cuda::LaunchFillRandom({w.p, size * size, false, 0.0f, 16.0f, 2, true}, 0);
  cuda::LaunchFillRandom({xs.p, 1, false, 0.01f, 0.0f, 3}, 0);
  cuda::LaunchFillRandom({ws.p, 1, false, 0.01f, 0.0f, 4}, 0);
  cuda::LtFp8Args g{static_cast<uint8_t*>(x.p), static_cast<uint8_t*>(w.p),
                    static_cast<cuda::bf16*>(out.p), size, size, size, size, size, size, false,
                    static_cast<float*>(xs.p), static_cast<float*>(ws.p), false};
  if (!cuda::LtFp8Available(g)) return 0.0;
  bool launched = true;
  const double ms = bench::MedianMs(10, [&](int) { launched = cuda::LtMatmulFp8(g, 0) && launched; });
  if (!launched) return 0.0;  // refused at launch (the algorithm was found, the call failed)
  return 2.0 * double(size) * double(size) * double(size) / (ms * 1e-3);
}

// ops::Sample per step by filter at batch 1 / 8 / 128 for one vocabulary; returns nothing,
// prints one table (us per step, graph replay) and the bf16 read-back it replaces.
void BenchSampling(int64_t vocab) {
  struct Mode { const char* name; ops::SampleRow row; bool penalties; };
  auto row = [](float t, int k, float p, float mp) {
    ops::SampleRow r;
    r.temperature = t, r.top_k = k, r.top_p = p, r.min_p = mp;
    return r;
  };
  ops::SampleRow pen = row(0.8f, 0, 0.9f, 0.0f);
  pen.repetition_penalty = 1.1f, pen.presence_penalty = 0.5f, pen.frequency_penalty = 0.2f;
  const Mode modes[] = {{"greedy", row(0.0f, 0, 1.0f, 0.0f), false},
                        {"temperature 0.8", row(0.8f, 0, 1.0f, 0.0f), false},
                        {"top_k 50", row(0.8f, 50, 1.0f, 0.0f), false},
                        {"top_k 2000", row(0.8f, 2000, 1.0f, 0.0f), false},
                        {"top_p 0.9", row(0.8f, 0, 0.9f, 0.0f), false},
                        {"top_p 0.5 T=1.5", row(1.5f, 0, 0.5f, 0.0f), false},
                        {"k50 p0.9 min_p0.05", row(0.8f, 50, 0.9f, 0.05f), false},
                        {"k2000 p0.9", row(0.8f, 2000, 0.9f, 0.0f), false},
                        {"min_p 0.05", row(0.8f, 0, 1.0f, 0.05f), false},
                        {"penalties + top_p 0.9", pen, true}};
  const int batches[] = {1, 8, 128};
  fmt::print("\nops::Sample, vocab {} bf16 logits uniform in [-8, 8) (us per step, graph replay; "
             "readback = bf16 logits D2H into pinned memory, what the host sampler needs first)\n",
             vocab);
  fmt::print("{:<24} {:>8} {:>8} {:>8}\n", "mode", "b=1", "b=8", "b=128");
  for (const Mode& m : modes) {
    std::vector<double> us;
    for (int n : batches) {
      Buf logits(size_t(n * vocab * 2)), rows(size_t(n) * sizeof(ops::SampleRow)),
          counts(size_t(n * vocab * 4)), tokens(size_t(n) * 4), lp(size_t(n) * 4);
      bench::FillBf16(logits.p, n * vocab, 99, 8.0f);
      std::vector<ops::SampleRow> h(static_cast<size_t>(n), m.row);
      std::vector<int32_t> hc(static_cast<size_t>(n * vocab), 0);
      for (int r = 0; r < n; ++r) {
        h[size_t(r)].seed_lo = uint32_t(1000 + r);
        h[size_t(r)].counts_row = m.penalties ? r : -1;
        for (int t = 0; t < 200; ++t) hc[size_t(r * vocab + (t * 7919 + r) % vocab)] = 1 + 2 * (t % 3);
      }
      PG_CUDA_CHECK(cudaMemcpy(rows.p, h.data(), h.size() * sizeof h[0], cudaMemcpyHostToDevice));
      PG_CUDA_CHECK(cudaMemcpy(counts.p, hc.data(), hc.size() * 4, cudaMemcpyHostToDevice));
      ops::SampleParams p;
      p.logits = Dev(logits.p, DType::kBF16, {n, vocab});
      p.rows = Dev(rows.p, DType::kI32, {n, ops::kSampleRowWords});
      if (m.penalties) p.token_counts = Dev(counts.p, DType::kI32, {n, vocab});
      p.tokens = Dev(tokens.p, DType::kI32, {n});
      us.push_back(bench::GraphMedianMs([&](int) { ops::Sample(p); }, 10) * 1e3);
    }
    fmt::print("{:<24} {:>8.1f} {:>8.1f} {:>8.1f}\n", m.name, us[0], us[1], us[2]);
  }
  std::vector<double> rb;
  for (int n : batches) {
    Buf logits(size_t(n * vocab * 2));
    void* host = nullptr;
    PG_CUDA_CHECK(cudaMallocHost(&host, size_t(n * vocab * 2)));
    rb.push_back(bench::MedianMs(10, [&](int) {
      PG_CUDA_CHECK(cudaMemcpyAsync(host, logits.p, size_t(n * vocab * 2), cudaMemcpyDeviceToHost, 0));
    }) * 1e3);
    cudaFreeHost(host);
  }
  fmt::print("{:<24} {:>8.1f} {:>8.1f} {:>8.1f}\n", "readback (replaced)", rb[0], rb[1], rb[2]);
}

void BenchFp8Matmul(double bw_gbs, double fp8_tflops) {
  struct Shape { const char* name; int64_t m, k; };
  const Shape shapes[] = {{"qkv 6144x4096", 6144, 4096}, {"o 4096x4096", 4096, 4096},
                          {"gate_up 28672x4096", 28672, 4096}, {"down 4096x14336", 4096, 14336}};
  fmt::print("\nfp8 e4m3 Matmul, per-tensor scale (us per call, graph replay); floor = max(m*k B"
             " / HBM, 2nmk / fp8 GEMM rate); gemv = the <=4-row kernel forced\n");
  fmt::print("{:<20} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}\n", "matmul", "batch",
             "op_us", "gemv_us", "lt_us", "tiled_us", "floor_us", "GB/s", "floor/t");
  double layer_us[4] = {0, 0, 0, 0}, layer_floor[4] = {0, 0, 0, 0};
  for (const Shape& sh : shapes) {
    const size_t wbytes = size_t(sh.m * sh.k);
    const int copies = int(std::max<size_t>(1, (size_t(256) << 20) / wbytes + 1));
    std::vector<std::unique_ptr<Buf>> ws;
    for (int c = 0; c < copies; ++c) {
      ws.push_back(std::make_unique<Buf>(wbytes));
      cuda::LaunchFillRandom({ws.back()->p, sh.m * sh.k, false, 0.0f, 16.0f, uint64_t(10 + c), true}, 0);
    }
    Buf scale(4);
    cuda::LaunchFillRandom({scale.p, 1, false, 0.00125f, 0.0f, 5}, 0);
    int bi = 0;
    for (int64_t n : {1, 8, 32, 128}) {
      Buf x(size_t(n * sh.k * 2)), out(size_t(n * sh.m * 2));
      bench::FillBf16(x.p, n * sh.k, 7, 1.0f);
      auto op = [&](int i) {
        ops::Matmul({.x = Dev(x.p, DType::kBF16, {n, sh.k}),
                     .w = Dev(ws[size_t(i % copies)]->p, DType::kF8E4M3, {sh.m, sh.k}),
                     .out = Dev(out.p, DType::kBF16, {n, sh.m}),
                     .w_scale = Dev(scale.p, DType::kF32, {1})});
      };
      const double op_ms = bench::GraphMedianMs(op);
      // The n > 4 paths forced (NaN: not available for this shape).
      double lt_ms = NAN, tiled_ms = NAN;
      if (n > 4) {
        ops::MatmulParams p{.x = Dev(x.p, DType::kBF16, {n, sh.k}),
                            .w = Dev(ws[0]->p, DType::kF8E4M3, {sh.m, sh.k}),
                            .out = Dev(out.p, DType::kBF16, {n, sh.m}),
                            .w_scale = Dev(scale.p, DType::kF32, {1})};
        if (ops::fp8::RunLtOnly(p))
          lt_ms = bench::GraphMedianMs([&](int i) {
            p.w.data = ws[size_t(i % copies)]->p;
            ops::fp8::RunLtOnly(p);
          });
        p.w.data = ws[0]->p;
        if (ops::fp8::RunTiled(p))
          tiled_ms = bench::GraphMedianMs([&](int i) {
            p.w.data = ws[size_t(i % copies)]->p;
            ops::fp8::RunTiled(p);
          });
      }
      double gemv_ms = NAN;
      if (n <= 32) {
        cuda::Fp8GemvArgs a{};
        a.x = static_cast<cuda::bf16*>(x.p);
        a.scale = static_cast<float*>(scale.p);
        a.scale_mode = cuda::ScaleMode::kTensor;
        a.out = static_cast<cuda::bf16*>(out.p);
        a.n = n, a.k = sh.k, a.m = sh.m, a.ldx = sh.k, a.ldw = sh.k, a.ldo = sh.m;
        gemv_ms = bench::GraphMedianMs([&](int i) {
          a.w = static_cast<uint8_t*>(ws[size_t(i % copies)]->p);
          cuda::LaunchFp8Gemv(a, cuda::CurrentStream());
        });
      }
      const double bytes = double(wbytes) + double(n * (sh.k + sh.m) * 2);
      const double floor_ms = std::max(bytes / (bw_gbs * 1e9),
                                       2.0 * double(n * sh.m * sh.k) / (fp8_tflops * 1e12)) * 1e3;
      layer_us[bi] += op_ms * 1e3;
      layer_floor[bi] += floor_ms * 1e3;
      ++bi;
      fmt::print("{:<20} {:>5} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>8.0f} {:>7.0f}%\n",
                 sh.name, n, op_ms * 1e3, gemv_ms * 1e3, lt_ms * 1e3, tiled_ms * 1e3,
                 floor_ms * 1e3, bytes / (op_ms * 1e-3) / 1e9, 100.0 * floor_ms / op_ms);
    }
  }
  const int64_t bs[] = {1, 8, 32, 128};
  for (int i = 0; i < 4; ++i)
    fmt::print("one layer's 4 matmuls, batch {:>3}: {:8.1f} us vs floor {:8.1f} us ({:.0f}%)\n",
               bs[i], layer_us[i], layer_floor[i], 100.0 * layer_floor[i] / layer_us[i]);
}

}  // namespace

int pg::bench::RunSampleBench(bool sampling_only) {
  try {
    cudaDeviceProp prop{};
    PG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    fmt::print("device: {} ({} SMs); PDL {}\n", prop.name, prop.multiProcessorCount,
               cuda::PdlEnabled() ? "on" : "off (PEREGRINE_PDL=0)");
    if (sampling_only) {
      for (int64_t vocab : {128256, 151936}) BenchSampling(vocab);
      return 0;
    }
    const double bw_gbs = cuda::MeasureHbmBytesPerS() / 1e9;
    fmt::print("HBM d2d copy: {:.1f} GB/s (read + written)\n", bw_gbs);
    const double bf16_tflops = cuda::MeasureBf16GemmFlopsPerS(8192) / 1e12;
    double fp8_tflops = Fp8GemmFlopsPerS(8192) / 1e12;
    fmt::print("GEMM 8192^3 (cuBLASLt): bf16 {:.1f} TFLOP/s, fp8 e4m3 {:.1f} TFLOP/s\n",
               bf16_tflops, fp8_tflops);
    if (fp8_tflops <= 0) {
      fp8_tflops = 2 * bf16_tflops;
      fmt::print("no cuBLASLt fp8 algorithm: the fp8 floor uses 2x the bf16 rate ({:.0f})\n",
                 fp8_tflops);
    }
    BenchSampling(128256);
    BenchFp8Matmul(bw_gbs, fp8_tflops);
    fmt::print("\ncuBLASLt fp8 planning:\n{}", cuda::LtFp8Diagnostics());
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_sample: {}\n", e.what());
    return 1;
  }
}
