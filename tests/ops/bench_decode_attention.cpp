// Decode attention benchmark (one H200 run): ops::Attention on decode batches (one query per
// sequence) of Llama-3.1-8B geometry (32 query / 8 kv heads, head_dim 128, page 16), bf16 and
// fp8 e4m3 KV caches, batch 1 / 8 / 32 / 128 at 1K and 32K context, against
//   floor = K + V bytes of the batch / HBM bandwidth measured in the same run
// (kernels/cuda/ceilings.h: 2 GiB device-to-device copies, read + write bytes).
// graph = per-call time from replaying a CUDA graph of 20 calls (median of 10 replays): what
// decode under CUDA graphs pays; eager = one call timed with events (host dispatch included).
// Caches rotate over >= 1 GiB of pages so that L2 does not hold them; pages are shuffled.
// Usage: bench_decode [--quick | --batches=1,32] [--contexts=1024,8192] [--fused] [--kv-heads=4]
// [--bf16] (quick: batch 1 and 8 only; --fused: also RopeKvWrite + Attention against
// RopeKvWriteAttention; --kv-heads: 32 query heads over that many kv heads instead of 8, e.g.
// 4 for Qwen3-30B-A3B's group of 8; --bf16: no fp8 rows), or bench_decode --kv-layout-probe
// [...] (bench_kv_layout.cu); also in
// decode_gpu_check (decode_gpu_main.cpp) as `decode_gpu_check --bench [--quick]`.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "core/dtype.h"
#include "kernels/cuda/batch_plan.h"
#include "kernels/cuda/ceilings.h"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/ops.h"
#include "kernels/ops_fused_attention.h"

namespace {

using namespace pg;

using Buf = bench::DeviceBuf;
using bench::GraphMedianMs;

// Fills `bytes` of device memory with valid random values of `dtype` (bf16 or e4m3, |x| in
// about [0.05, 2]): a 16 MiB host pattern (made once per dtype) copied over the buffer.
void FillRandom(void* dst, size_t bytes, DType dtype, uint32_t seed) {
  constexpr size_t kChunk = size_t(16) << 20;
  static std::vector<uint8_t> patterns[2];
  std::vector<uint8_t>& host = patterns[dtype == DType::kBF16 ? 0 : 1];
  if (host.empty()) {
    host.resize(kChunk);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> mag(0.05f, 2.0f);
    if (dtype == DType::kBF16) {
      for (size_t i = 0; i + 1 < kChunk; i += 2) {
        const uint16_t b = F32ToBf16(mag(rng) * (rng() & 1 ? 1.0f : -1.0f));
        std::memcpy(&host[i], &b, 2);
      }
    } else {
      for (size_t i = 0; i < kChunk; ++i) host[i] = F32ToF8E4M3(mag(rng) * (rng() & 1 ? 1.0f : -1.0f));
    }
  }
  const size_t first = std::min(kChunk, bytes);
  PG_CUDA_CHECK(cudaMemcpy(dst, host.data(), first, cudaMemcpyHostToDevice));
  for (size_t off = first; off < bytes; off += std::min(off, bytes - off))  // doubling D2D
    PG_CUDA_CHECK(cudaMemcpy(static_cast<char*>(dst) + off, dst, std::min(off, bytes - off),
                             cudaMemcpyDeviceToDevice));
}



}  // namespace

namespace pg::bench {

int RunKvLayoutProbe(int argc, char** argv);  // bench_kv_layout.cu

int RunDecodeBench(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--kv-layout-probe") == 0) return RunKvLayoutProbe(argc, argv);
  try {
    // --quick: batch 1 and 8; --batches=a,b,...: those batches. --fused (any position): each
    // row also times RopeKvWrite + Attention (two kernels) against RopeKvWriteAttention (one).
    // --contexts=a,b,...: those context lengths (default 1024, 32768). Flags in any order.
    bool quick = false, fused_rows = false, bf16_only = false;
    int kv_heads = 8;
    std::vector<int> only, contexts;
    for (int i = 1; i < argc; ++i) {
      quick = quick || std::strcmp(argv[i], "--quick") == 0;
      fused_rows = fused_rows || std::strcmp(argv[i], "--fused") == 0;
      bf16_only = bf16_only || std::strcmp(argv[i], "--bf16") == 0;
      if (std::strncmp(argv[i], "--kv-heads=", 11) == 0) kv_heads = std::atoi(argv[i] + 11);
      if (std::strncmp(argv[i], "--batches=", 10) == 0) only = CommaInts(argv[i] + 10);
      if (std::strncmp(argv[i], "--contexts=", 11) == 0) contexts = CommaInts(argv[i] + 11);
    }
    if (contexts.empty()) contexts = {1024, 32768};
    cudaDeviceProp prop{};
    PG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const double bw = cuda::MeasureHbmBytesPerS();
    fmt::print("device: {} ({} SMs); HBM d2d copy {:.0f} GB/s (read + write)\n", prop.name,
               prop.multiProcessorCount, bw / 1e9);
    const int heads = 32, d = 128, page = 16;
    if (kv_heads <= 0 || heads % kv_heads != 0) throw std::runtime_error("--kv-heads must divide 32");
    fmt::print("geometry: {} query heads, {} kv heads, head_dim {}, page {}\n", heads, kv_heads, d, page);
    fmt::print("{:<6} {:>8} {:>6} {:>10} {:>10} {:>10} {:>8} {:>8}\n", "kv", "ctx", "batch",
               "graph_us", "eager_us", "floor_us", "GB/s", "floor/t");
    std::vector<int> batches = !only.empty() ? only
                               : quick       ? std::vector<int>{1, 8}
                                             : std::vector<int>{1, 8, 32, 128};
    for (DType dt : {DType::kBF16, DType::kF8E4M3}) {
      if (bf16_only && dt != DType::kBF16) continue;
      const size_t esize = dt == DType::kBF16 ? 2 : 1;
      for (int ctx : contexts) {
        for (int batch : batches) {
          const int64_t pages_per_seq = (ctx + page - 1) / page;
          const size_t kv_bytes_step = size_t(batch) * size_t(ctx) * kv_heads * d * esize * 2;
          const int rot = int(std::max<size_t>(1, (size_t(1) << 30) / kv_bytes_step + 1));
          const int64_t num_pages = pages_per_seq * batch * rot;
          const size_t cache_bytes = size_t(num_pages) * page * kv_heads * d * esize;
          Buf kc(cache_bytes), vc(cache_bytes);
          FillRandom(kc.p, cache_bytes, dt, 21);
          FillRandom(vc.p, cache_bytes, dt, 22);
          Buf q(size_t(batch) * heads * d * 2), o(size_t(batch) * heads * d * 2);
          FillRandom(q.p, size_t(batch) * heads * d * 2, DType::kBF16, 23);
          // The new rows' k, v and positions (--fused rows).
          Buf kn(size_t(batch) * kv_heads * d * 2), vn(size_t(batch) * kv_heads * d * 2);
          Buf pos(size_t(batch) * sizeof(int32_t));
          FillRandom(kn.p, size_t(batch) * kv_heads * d * 2, DType::kBF16, 24);
          FillRandom(vn.p, size_t(batch) * kv_heads * d * 2, DType::kBF16, 25);
          {
            const std::vector<int32_t> p(size_t(batch), ctx - 1);
            PG_CUDA_CHECK(cudaMemcpy(pos.p, p.data(), p.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
          }
          const size_t nb = size_t(batch);
          std::vector<int32_t> q_start(nb), q_len(nb, 1), kv_len(nb, ctx), page_start(nb);
          std::iota(q_start.begin(), q_start.end(), 0);
          for (int s = 0; s < batch; ++s) page_start[size_t(s)] = int32_t(s * pages_per_seq);
          std::vector<std::vector<int32_t>> tables(static_cast<size_t>(rot));
          std::mt19937 rng(5);
          for (int r = 0; r < rot; ++r) {
            auto& t = tables[size_t(r)];
            t.resize(size_t(pages_per_seq * batch));
            std::iota(t.begin(), t.end(), int32_t(r * pages_per_seq * batch));
            std::shuffle(t.begin(), t.end(), rng);
          }
          std::vector<std::unique_ptr<cuda::DeviceBatchPlan>> plans;
          std::vector<ops::AttentionBatch> batches_v;
          for (int r = 0; r < rot; ++r) {
            batches_v.push_back({batch, page, q_start, q_len, kv_len, page_start, tables[size_t(r)]});
            plans.push_back(std::make_unique<cuda::DeviceBatchPlan>());
            plans.back()->Upload(batches_v.back(), 0);
            batches_v.back().device = &plans.back()->view();
          }
          PG_CUDA_CHECK(cudaDeviceSynchronize());
          auto cache_view = [&](void* p) {
            return TensorView::Contiguous(p, dt, {num_pages, page, kv_heads, d}, Device::kCuda);
          };
          ops::KvCacheView cache{cache_view(kc.p), cache_view(vc.p), 1.0f, 1.0f};
          auto qv = TensorView::Contiguous(q.p, DType::kBF16, {batch, heads, d}, Device::kCuda);
          auto ov = TensorView::Contiguous(o.p, DType::kBF16, {batch, heads, d}, Device::kCuda);
          const double floor_ms = double(kv_bytes_step) / bw * 1e3;
          auto row = [&](const std::string& ctx_label, std::vector<ops::AttentionBatch>& bv) {
            auto attn = [&](int i) { ops::Attention({qv, ov, cache, &bv[size_t(i % rot)]}); };
            const double g_ms = GraphMedianMs(attn);
            const double e_ms = bench::MedianMs(20, attn);
            fmt::print("{:<6} {:>8} {:>6} {:>10.2f} {:>10.2f} {:>10.2f} {:>8.0f} {:>7.0f}%\n",
                       dt == DType::kBF16 ? "bf16" : "fp8", ctx_label, batch, g_ms * 1e3,
                       e_ms * 1e3, floor_ms * 1e3, double(kv_bytes_step) / (g_ms * 1e-3) / 1e9,
                       100.0 * floor_ms / g_ms);
            std::fflush(stdout);
            if (!fused_rows) return;
            const ops::RopeConfig llama3{.theta = 500000.0f,
                                         .scaling = ops::RopeScaling::kLlama3, .factor = 8.0f,
                                         .low_freq_factor = 1.0f, .high_freq_factor = 4.0f,
                                         .original_max_position = 8192};
            auto kvv = [&](void* p) {
              return TensorView::Contiguous(p, DType::kBF16, {batch, kv_heads, d}, Device::kCuda);
            };
            const auto posv = TensorView::Contiguous(pos.p, DType::kI32, {batch}, Device::kCuda);
            auto rope = [&](int i) {
              return ops::RopeKvWriteParams{qv, kvv(kn.p), kvv(vn.p), posv, llama3, cache,
                                            &bv[size_t(i % rot)]};
            };
            auto two = [&](int i) {
              ops::RopeKvWrite(rope(i));
              ops::Attention({qv, ov, cache, &bv[size_t(i % rot)]});
            };
            auto one = [&](int i) { ops::RopeKvWriteAttention({.rope = rope(i), .out = ov}); };
            const double two_ms = GraphMedianMs(two), one_ms = GraphMedianMs(one);
            fmt::print("  fused {:<5} {:>8} {:>6}: RopeKvWrite+Attention {:>8.2f} us, "
                       "RopeKvWriteAttention {:>8.2f} us ({:.2f}x), floor {:.2f} us\n",
                       dt == DType::kBF16 ? "bf16" : "fp8", ctx_label, batch, two_ms * 1e3,
                       one_ms * 1e3, two_ms / one_ms, floor_ms * 1e3);
            std::fflush(stdout);
          };
          row(std::to_string(ctx), batches_v);
          if (ctx < 32768) {
            // The same step under a split plan made for 32K (a decode graph captured at 32K
            // replayed at this length): the host batch says 32K (pages that validate), the
            // device plan holds the real lengths.
            const int64_t plan_pages = 32768 / page;
            std::vector<int32_t> kv_plan(nb, 32768), ps_plan(nb), pt_plan(size_t(plan_pages * batch));
            for (int s = 0; s < batch; ++s) ps_plan[size_t(s)] = int32_t(s * plan_pages);
            for (size_t i = 0; i < pt_plan.size(); ++i) pt_plan[i] = int32_t(int64_t(i) % num_pages);
            std::vector<ops::AttentionBatch> planned;
            for (int r = 0; r < rot; ++r) {
              planned.push_back({batch, page, q_start, q_len, kv_plan, ps_plan, pt_plan});
              planned.back().device = &plans[size_t(r)]->view();
            }
            row(std::to_string(ctx) + "@32K", planned);
          }
        }
      }
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_decode: {}\n", e.what());
    return 1;
  }
}

}  // namespace pg::bench

#ifndef PG_DECODE_BENCH_NO_MAIN
int main(int argc, char** argv) { return pg::bench::RunDecodeBench(argc, argv); }
#endif
