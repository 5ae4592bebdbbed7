// CUDA kernel benchmark (one H200 run of tools/gpu/cuda_check.sh):
//  1. ceilings measured in this run: HBM bandwidth (cudaMemcpy device-to-device, bytes read
//     + written) and the bf16 GEMM rate (cuBLASLt 8192^3);
//  2. Matmul (registry dispatch, and GEMV / cuBLASLt forced) on Llama-3.1-8B shapes at batch
//     1, 8, 32, 128 against floor = max(weight bytes / bandwidth, FLOPs / GEMM rate);
//  3. paged decode attention (32:8 heads, d 128, page 16) at 1K and 32K contexts against
//     KV bytes / bandwidth.
// Weights and caches rotate over > 256 MiB so that L2 (60 MB) does not hold them. Times are
// medians of event-timed repetitions after warm-up. Prints a table; no arguments.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "bench_timing.h"
#include "kernels/cuda/batch_plan.h"
#include "kernels/cuda/ceilings.h"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/device_params.h"
#include "kernels/cuda/gemm/matmul_lt.h"
#include "kernels/ops.h"

namespace pg::bench {
void FillBf16(void* p, int64_t n, uint32_t seed, float scale);
}

namespace {

using namespace pg;

using Buf = bench::DeviceBuf;
using bench::GraphMedianMs;
using bench::MedianMs;



TensorView Dev(void* p, std::initializer_list<int64_t> shape) {
  return TensorView::Contiguous(p, DType::kBF16, shape, Device::kCuda);
}

}  // namespace

int main() {
  try {
    cudaDeviceProp prop{};
    PG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    fmt::print("device: {} ({} SMs, {:.0f} GiB, L2 {} MiB)\n", prop.name, prop.multiProcessorCount,
               double(prop.totalGlobalMem) / (1 << 30), prop.l2CacheSize >> 20);

    // ---- ceilings ------------------------------------------------------------------------
    // Shared with peregrine bench gpu-decode / gpu-prefill (kernels/cuda/ceilings.h).
    const double bw_gbs = cuda::MeasureHbmBytesPerS() / 1e9;
    fmt::print("HBM d2d copy: {:.1f} GB/s (2 GiB copies, read + written)\n", bw_gbs);
    const double gemm_tflops = cuda::MeasureBf16GemmFlopsPerS(8192) / 1e12;
    fmt::print("bf16 GEMM 8192^3 (cuBLASLt): {:.1f} TFLOP/s\n", gemm_tflops);

    // ---- Matmul on Llama-3.1-8B shapes ------------------------------------------------------
    struct Shape { const char* name; int64_t m, k; };
    const Shape shapes[] = {{"q/o 4096x4096", 4096, 4096}, {"kv 1024x4096", 1024, 4096},
                            {"gate/up 14336x4096", 14336, 4096}, {"down 4096x14336", 4096, 14336},
                            {"lm_head 128256x4096", 128256, 4096}};
    fmt::print("\n(us: per call; graph = kernel time from CUDA-graph replay, eager = one ops:: call"
               " incl. host dispatch)\n");
    fmt::print("{:<22} {:>5} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9}\n", "matmul", "batch",
               "graph(op)", "eager(op)", "graph(gemv)", "graph(lt)", "floor_us", "GB/s", "floor/t");
    for (const Shape& sh : shapes) {
      const size_t wbytes = size_t(sh.m * sh.k * 2);
      const int copies = int(std::max<size_t>(1, (size_t(256) << 20) / wbytes + 1));
      std::vector<std::unique_ptr<Buf>> ws;
      for (int c = 0; c < copies; ++c) {
        ws.push_back(std::make_unique<Buf>(wbytes));
        bench::FillBf16(ws.back()->p, sh.m * sh.k, 10 + c, 0.02f);
      }
      for (int64_t n : {1, 8, 32, 128}) {
        Buf x(size_t(n * sh.k * 2)), out(size_t(n * sh.m * 2));
        bench::FillBf16(x.p, n * sh.k, 7, 1.0f);
        auto w_of = [&](int i) { return ws[size_t(i % copies)]->p; };
        auto op = [&](int i) {
          ops::Matmul({Dev(x.p, {n, sh.k}), Dev(w_of(i), {sh.m, sh.k}), Dev(out.p, {n, sh.m}), {}, {}, false});
        };
        const double op_ms = GraphMedianMs(op);
        const double eager_ms = MedianMs(30, op);
        cuda::GemvArgs gv{static_cast<cuda::bf16*>(x.p), nullptr, static_cast<cuda::bf16*>(out.p),
                          nullptr, n, sh.k, sh.m, sh.k, sh.k, sh.m, false};
        const double gemv_ms = n > 8 ? NAN : GraphMedianMs([&](int i) {
          gv.w = static_cast<cuda::bf16*>(w_of(i));
          cuda::LaunchGemv(gv, cuda::CurrentStream());
        });
        cuda::LtGemmArgs lt{static_cast<cuda::bf16*>(x.p), nullptr, static_cast<cuda::bf16*>(out.p),
                            n, sh.k, sh.m, sh.k, sh.k, sh.m, false};
        const double lt_ms = GraphMedianMs([&](int i) {
          lt.w = static_cast<cuda::bf16*>(w_of(i));
          PG_ENSURE(cuda::LtMatmul(lt, cuda::CurrentStream()), kInternal, "no algo");
        });
        const double bytes = double(wbytes) + double(n * (sh.k + sh.m) * 2);
        const double floor_ms = std::max(bytes / (bw_gbs * 1e9), 2.0 * n * sh.m * sh.k / (gemm_tflops * 1e12)) * 1e3;
        fmt::print("{:<22} {:>5} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>9.2f} {:>9.0f} {:>8.0f}%\n",
                   sh.name, n, op_ms * 1e3, eager_ms * 1e3, gemv_ms * 1e3, lt_ms * 1e3, floor_ms * 1e3,
                   bytes / (op_ms * 1e-3) / 1e9, 100.0 * floor_ms / op_ms);
      }
    }

    // ---- decode attention ----------------------------------------------------------------
    fmt::print("\n{:<26} {:>6} {:>10} {:>10} {:>10} {:>9} {:>9}\n", "decode attention 32:8 d128",
               "batch", "graph_us", "eager_us", "floor_us", "GB/s", "floor/t");
    const int heads = 32, kv_heads = 8, d = 128, page = 16;
    for (auto [ctx, batch] : {std::pair{1024, 1}, std::pair{1024, 8}, std::pair{1024, 32},
                              std::pair{32768, 1}, std::pair{32768, 8}}) {
      const int64_t pages_per_seq = (ctx + page - 1) / page;
      const size_t kv_bytes_step = size_t(batch) * size_t(ctx) * kv_heads * d * 2 * 2;
      const int rot = int(std::max<size_t>(1, (size_t(256) << 20) / kv_bytes_step + 1));
      const int64_t num_pages = pages_per_seq * batch * rot;
      const int64_t cache_elems = num_pages * page * kv_heads * d;
      Buf kc(size_t(cache_elems * 2)), vc(size_t(cache_elems * 2));
      bench::FillBf16(kc.p, cache_elems, 21, 1.0f);
      bench::FillBf16(vc.p, cache_elems, 22, 1.0f);
      Buf q(size_t(batch * heads * d * 2)), o(size_t(batch * heads * d * 2));
      bench::FillBf16(q.p, batch * heads * d, 23, 1.0f);
      const size_t nb = static_cast<size_t>(batch);
      std::vector<int32_t> q_start(nb), q_len(nb, 1), kv_len(nb, ctx), page_start(nb);
      std::iota(q_start.begin(), q_start.end(), 0);
      for (int s = 0; s < batch; ++s) page_start[size_t(s)] = int32_t(s * pages_per_seq);
      std::vector<std::vector<int32_t>> tables(static_cast<size_t>(rot));
      std::vector<std::unique_ptr<cuda::DeviceBatchPlan>> plans;
      std::vector<ops::AttentionBatch> batches;
      std::mt19937 rng(5);
      for (int r = 0; r < rot; ++r) {  // disjoint, shuffled pages per rotation
        tables[size_t(r)].resize(size_t(pages_per_seq * batch));
        std::iota(tables[size_t(r)].begin(), tables[size_t(r)].end(), int32_t(r * pages_per_seq * batch));
        std::shuffle(tables[size_t(r)].begin(), tables[size_t(r)].end(), rng);
      }
      for (int r = 0; r < rot; ++r) {
        batches.push_back({batch, page, q_start, q_len, kv_len, page_start, tables[size_t(r)]});
        plans.push_back(std::make_unique<cuda::DeviceBatchPlan>());
        plans.back()->Upload(batches.back(), 0);
        batches.back().device = &plans.back()->view();
      }
      PG_CUDA_CHECK(cudaDeviceSynchronize());
      ops::KvCacheView cache{TensorView::Contiguous(kc.p, DType::kBF16, {num_pages, page, kv_heads, d}, Device::kCuda),
                             TensorView::Contiguous(vc.p, DType::kBF16, {num_pages, page, kv_heads, d}, Device::kCuda)};
      auto attn = [&](int i) {
        ops::Attention({Dev(q.p, {batch, heads, d}), Dev(o.p, {batch, heads, d}), cache,
                        &batches[size_t(i % rot)]});
      };
      const double ms = GraphMedianMs(attn);
      const double eager_ms = MedianMs(30, attn);
      const double floor_ms = double(kv_bytes_step) / (bw_gbs * 1e9) * 1e3;
      fmt::print("{:<26} {:>6} {:>10.2f} {:>10.2f} {:>10.2f} {:>9.0f} {:>8.0f}%\n", fmt::format("ctx {}", ctx),
                 batch, ms * 1e3, eager_ms * 1e3, floor_ms * 1e3, double(kv_bytes_step) / (ms * 1e-3) / 1e9, 100.0 * floor_ms / ms);
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_cuda: {}\n", e.what());
    return 1;
  }
}
