// Prefill attention benchmark (one H200 run): the tensor-core prefill kernel
// (attention/prefill_attention.h) on Llama-3.1-8B attention geometry (32 query / 8 kv heads,
// head_dim 128, page 16) for 8K and 32K prompts and 800 new tokens on a 50K cached prefix,
// against FLOPs / the bf16 GEMM rate measured in the same run (cuBLASLt 8192^3).
// FLOPs = 4 * heads * head_dim * (keys attended, summed over query rows): causal, so about
// half of 4 * q * kv * heads * head_dim for a prompt without a prefix.
// Rows: the op (ops::Attention: routing, planning, split-K as the engine runs it); the mma.sync
// kernel forced to 64- and 128-row tiles and the sm_90a wgmma kernel, at forced split counts;
// the old row-per-block kernel (paged_attention.cu) on the smaller shapes, for the before/after
// ratio.
// Times are medians of event-timed calls after warm-up. No arguments.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "core/dtype.h"
#include "kernels/cuda/attention/prefill_attention.h"
#include "kernels/cuda/batch_plan.h"
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


// Median ms of `reps` launches of fn (bench_timing.h; launch errors surface at the end).
double MedianMs(int reps, const std::function<void()>& fn) {
  const double ms = bench::MedianMs(reps, [&](int) { fn(); });
  PG_CUDA_CHECK(cudaGetLastError());
  return ms;
}

TensorView Dev(void* p, std::initializer_list<int64_t> shape) {
  return TensorView::Contiguous(p, DType::kBF16, shape, Device::kCuda);
}

}  // namespace

int main(int argc, char** argv) {
  // `quick`: the op, 128-row tiles (mma.sync and wgmma) and fp8 rows only (no forced splits,
  // no row kernel).
  const bool quick = argc > 1 && std::string(argv[1]) == "quick";
  try {
    cudaDeviceProp prop{};
    PG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    fmt::print("device: {} ({} SMs)\n", prop.name, prop.multiProcessorCount);
    double gemm_tflops = 0;
    {
      const int64_t s = 8192;
      Buf x(size_t(s * s * 2)), w(size_t(s * s * 2)), o(size_t(s * s * 2));
      bench::FillBf16(x.p, s * s, 2, 1.0f);
      bench::FillBf16(w.p, s * s, 3, 1.0f);
      cuda::LtGemmArgs g{static_cast<cuda::bf16*>(x.p), static_cast<cuda::bf16*>(w.p),
                         static_cast<cuda::bf16*>(o.p), s, s, s, s, s, s, false};
      const double ms = MedianMs(10, [&] { PG_ENSURE(cuda::LtMatmul(g, 0), kInternal, "no algo"); });
      gemm_tflops = 2.0 * double(s) * s * s / (ms * 1e-3) / 1e12;
      fmt::print("bf16 GEMM 8192^3 (cuBLASLt): {:.1f} TFLOP/s ({:.3f} ms)\n", gemm_tflops, ms);
    }

    const int heads = 32, kv_heads = 8, d = 128, page = 16;
    struct Shape { const char* name; int q_len, kv_len; bool old_kernel; };
    const Shape shapes[] = {{"prefill 8K", 8192, 8192, true},
                            {"prefill 32K", 32768, 32768, false},
                            {"800 new on 50K cached", 800, 50800, true},
                            {"2K chunk on 30K cached", 2048, 32768, false}};
    fmt::print("\n{:<24} {:<22} {:>10} {:>9} {:>9} {:>9}\n", "prefill attention 32:8 d128",
               "variant", "ms", "TFLOP/s", "floor_ms", "floor/t");
    for (const Shape& sh : shapes) {
      const int64_t pages = (sh.kv_len + page - 1) / page;
      const int64_t cache_elems = pages * page * kv_heads * d;
      Buf kc(size_t(cache_elems * 2)), vc(size_t(cache_elems * 2));
      bench::FillBf16(kc.p, cache_elems, 21, 1.0f);
      bench::FillBf16(vc.p, cache_elems, 22, 1.0f);
      const int64_t q_elems = int64_t(sh.q_len) * heads * d;
      Buf q(size_t(q_elems * 2)), o(size_t(q_elems * 2));
      bench::FillBf16(q.p, q_elems, 23, 1.0f);
      std::vector<int32_t> q_start{0}, q_len{sh.q_len}, kv_len{sh.kv_len}, page_start{0};
      std::vector<int32_t> table(static_cast<size_t>(pages));
      std::iota(table.begin(), table.end(), 0);
      std::shuffle(table.begin(), table.end(), std::mt19937(5));
      ops::AttentionBatch batch{1, page, q_start, q_len, kv_len, page_start, table};
      cuda::DeviceBatchPlan plan;
      plan.Upload(batch, 0);
      batch.device = &plan.view();
      PG_CUDA_CHECK(cudaDeviceSynchronize());
      ops::KvCacheView cache{
          TensorView::Contiguous(kc.p, DType::kBF16, {pages, page, kv_heads, d}, Device::kCuda),
          TensorView::Contiguous(vc.p, DType::kBF16, {pages, page, kv_heads, d}, Device::kCuda)};
      const int64_t prefix = sh.kv_len - sh.q_len;
      // keys attended summed over rows: sum_{i<q} (prefix + i + 1)
      const double keys = double(sh.q_len) * double(prefix) + double(sh.q_len) * (sh.q_len + 1) / 2.0;
      const double flops = 4.0 * heads * d * keys;
      const double floor_ms = flops / (gemm_tflops * 1e12) * 1e3;
      const int reps = sh.q_len >= 32768 ? 5 : 10;
      auto row = [&](const std::string& variant, double ms) {
        fmt::print("{:<24} {:<22} {:>10.3f} {:>9.1f} {:>9.3f} {:>8.0f}%\n", sh.name, variant, ms,
                   flops / (ms * 1e-3) / 1e12, floor_ms, 100.0 * floor_ms / ms);
      };
      row("op (ops::Attention)", MedianMs(reps, [&] {
            ops::Attention({Dev(q.p, {sh.q_len, heads, d}), Dev(o.p, {sh.q_len, heads, d}), cache, &batch});
          }));
      // The kernel with forced tile heights and split counts.
      cuda::PrefillAttentionArgs a{};
      a.q = static_cast<cuda::bf16*>(q.p);
      a.out = static_cast<cuda::bf16*>(o.p);
      a.k_cache = static_cast<cuda::bf16*>(kc.p);
      a.v_cache = static_cast<cuda::bf16*>(vc.p);
      a.batch = plan.view();
      a.q_stride = a.out_stride = int64_t(heads) * d;
      a.heads = heads, a.kv_heads = kv_heads, a.head_dim = d;
      a.min_q_len = 2;
      a.logit_scale = 1.0f / std::sqrt(float(d));
      a.v_scale = 1.0f;
      // variant 0 / 1: mma.sync kernel, 64 / 128-row tiles; 2: the sm_90a wgmma kernel.
      // outputs[v]: variant v's output at auto splits (bf16 bits), cross-checked below.
      std::vector<std::vector<uint16_t>> outputs(3);
      for (int variant : {0, 1, 2})
        for (int force : {0, 1, 2, 3, 4, 6, 8}) {
          if (force > 1 && prefix == 0) continue;  // splits only help with a long prefix
          if (quick && (force != 0 || variant == 0)) continue;
          const int bm = variant == 0 ? 64 : 128;
          a.block_m = bm, a.allow_wgmma = variant == 2;
          cuda::PlanPrefillAttention(a, q_len.data(), kv_len.data(), 1, force);
          if (variant == 2 && !a.wgmma) continue;  // not sm_90 / PEREGRINE_PREFILL_WGMMA=0
          const size_t per = size_t(sh.q_len) * heads * size_t(a.num_splits);
          std::unique_ptr<Buf> ws;
          if (a.num_splits > 1) {
            ws = std::make_unique<Buf>(per * size_t(d + 2) * 4);
            a.partial_acc = static_cast<float*>(ws->p);
            a.partial_ml = a.partial_acc + per * size_t(d);
          }
          const double ms = MedianMs(reps, [&] { cuda::LaunchPrefillAttention(a, 0); });
          row(fmt::format("{} splits {}{}", a.wgmma ? "wgmma" : fmt::format("bm {}", bm), a.num_splits,
                          force == 0 ? " (auto)" : ""),
              ms);
          if (force == 0) {
            outputs[size_t(variant)].resize(size_t(q_elems));
            PG_CUDA_CHECK(cudaMemcpy(outputs[size_t(variant)].data(), o.p, size_t(q_elems) * 2,
                                     cudaMemcpyDeviceToHost));
          }
        }
      // The wgmma kernel against the mma.sync kernel (128-row tiles; the harness checks both
      // against the CPU reference on small shapes): same shape, same inputs.
      if (!outputs[1].empty() && !outputs[2].empty()) {
        double max_diff = 0, ss_ref = 0, ss_diff = 0;
        for (size_t i = 0; i < outputs[1].size(); ++i) {
          const float x = Bf16ToF32(outputs[1][i]), y = Bf16ToF32(outputs[2][i]);
          const double dlt = std::fabs(double(x) - double(y));
          max_diff = std::isnan(dlt) ? INFINITY : std::max(max_diff, dlt);
          ss_ref += double(x) * x, ss_diff += dlt * dlt;
        }
        fmt::print("{:<24} wgmma vs mma.sync: max |diff| {:.3g} (output rms {:.3g}), nmse {:.3g}\n",
                   sh.name, max_diff, std::sqrt(ss_ref / double(outputs[1].size())),
                   ss_ref > 0 ? ss_diff / ss_ref : 0.0);
      }
      {  // fp8 e4m3 caches (constant 0.5: timing only; correctness is the harness's)
        Buf k8{size_t(cache_elems)}, v8{size_t(cache_elems)};
        PG_CUDA_CHECK(cudaMemset(k8.p, 0x30, size_t(cache_elems)));
        PG_CUDA_CHECK(cudaMemset(v8.p, 0x30, size_t(cache_elems)));
        cuda::PrefillAttentionArgs f = a;
        f.k_cache = k8.p, f.v_cache = v8.p, f.kv_fp8 = true;
        cuda::PlanPrefillAttention(f, q_len.data(), kv_len.data(), 1);
        const size_t per = size_t(sh.q_len) * heads * size_t(f.num_splits);
        std::unique_ptr<Buf> ws;
        if (f.num_splits > 1) {
          ws = std::make_unique<Buf>(per * size_t(d + 2) * 4);
          f.partial_acc = static_cast<float*>(ws->p);
          f.partial_ml = f.partial_acc + per * size_t(d);
        }
        const double ms = MedianMs(reps, [&] { cuda::LaunchPrefillAttention(f, 0); });
        row(fmt::format("fp8 KV splits {} (auto)", f.num_splits), ms);
      }
      if (sh.old_kernel && !quick) {  // the row-per-block kernel, all rows, no splits
        cuda::AttentionArgs old{};
        old.q = a.q, old.out = a.out, old.k_cache = static_cast<const cuda::bf16*>(kc.p), old.v_cache = static_cast<const cuda::bf16*>(vc.p);
        old.batch = plan.view();
        old.q_stride = old.out_stride = a.q_stride;
        old.heads = heads, old.kv_heads = kv_heads, old.head_dim = d;
        old.num_splits = 1, old.chunk = sh.kv_len + 64;
        old.logit_scale = a.logit_scale, old.v_scale = 1.0f;
        row("old row kernel", MedianMs(3, [&] { cuda::LaunchAttention(old, 0); }));
      }
    }

    // Routing threshold: 8 sequences of q_len new tokens on 4K contexts, the tensor-core
    // kernel (auto splits) against the row kernel (split-K as the launcher plans it).
    // "tensor": the mma.sync kernel with 64-row tiles (what the op runs below 512 packed rows
    // per sequence); "wgmma": the wgmma kernel (128-row tiles), for the op's tile-height rule.
    fmt::print("\n{:<34} {:>12} {:>12} {:>12}\n", "small q_len, 8 seqs x 4K ctx", "tensor us",
               "wgmma us", "row us");
    for (const int ql : {1, 2, 4, 8, 16, 32, 64, 128}) {
      const int nseq = 8, ctx = 4096;
      const int64_t pages_per = ctx / page, pages = pages_per * nseq;
      const int64_t cache_elems = pages * page * kv_heads * d;
      Buf kc(size_t(cache_elems * 2)), vc(size_t(cache_elems * 2));
      bench::FillBf16(kc.p, cache_elems, 31, 1.0f);
      bench::FillBf16(vc.p, cache_elems, 32, 1.0f);
      const int rows = ql * nseq;
      Buf q(size_t(rows) * heads * d * 2), o(size_t(rows) * heads * d * 2);
      bench::FillBf16(q.p, int64_t(rows) * heads * d, 33, 1.0f);
      std::vector<int32_t> q_start(nseq), q_len(nseq, ql), kv_len(nseq, ctx), page_start(nseq);
      for (int s = 0; s < nseq; ++s) q_start[size_t(s)] = s * ql, page_start[size_t(s)] = int32_t(s * pages_per);
      std::vector<int32_t> table(static_cast<size_t>(pages));
      std::iota(table.begin(), table.end(), 0);
      ops::AttentionBatch batch{nseq, page, q_start, q_len, kv_len, page_start, table};
      cuda::DeviceBatchPlan plan;
      plan.Upload(batch, 0);
      PG_CUDA_CHECK(cudaDeviceSynchronize());
      cuda::PrefillAttentionArgs a{};
      a.q = static_cast<cuda::bf16*>(q.p), a.out = static_cast<cuda::bf16*>(o.p);
      a.k_cache = kc.p, a.v_cache = vc.p;
      a.batch = plan.view();
      a.q_stride = a.out_stride = int64_t(heads) * d;
      a.heads = heads, a.kv_heads = kv_heads, a.head_dim = d;
      a.min_q_len = 1, a.block_m = 64, a.allow_wgmma = false;
      a.logit_scale = 1.0f / std::sqrt(float(d)), a.v_scale = 1.0f;
      cuda::PlanPrefillAttention(a, q_len.data(), kv_len.data(), nseq);
      const size_t per = size_t(rows) * heads * 64;
      Buf ws(per * size_t(d + 2) * 4);
      a.partial_acc = static_cast<float*>(ws.p), a.partial_ml = a.partial_acc + per * size_t(d);
      const double t_ms = MedianMs(20, [&] { cuda::LaunchPrefillAttention(a, 0); });
      cuda::PrefillAttentionArgs wa = a;
      wa.allow_wgmma = true;
      cuda::PlanPrefillAttention(wa, q_len.data(), kv_len.data(), nseq);
      const double w_ms = wa.wgmma && size_t(wa.num_splits) <= 64
                              ? MedianMs(20, [&] { cuda::LaunchPrefillAttention(wa, 0); })
                              : NAN;
      cuda::AttentionArgs old{};
      old.q = a.q, old.out = a.out;
      old.k_cache = static_cast<const cuda::bf16*>(kc.p), old.v_cache = static_cast<const cuda::bf16*>(vc.p);
      old.batch = plan.view();
      old.q_stride = old.out_stride = a.q_stride;
      old.heads = heads, old.kv_heads = kv_heads, old.head_dim = d;
      old.logit_scale = a.logit_scale, old.v_scale = 1.0f;
      const int64_t base_blocks = int64_t(rows) * kv_heads, target = 8 * int64_t(prop.multiProcessorCount);
      int64_t splits = base_blocks < target ? std::min((target + base_blocks - 1) / base_blocks, int64_t(ctx / 64)) : 1;
      int64_t chunk = ((ctx + splits - 1) / splits + 31) / 32 * 32;
      old.chunk = int(chunk), old.num_splits = int((ctx + chunk - 1) / chunk);
      old.partial_acc = a.partial_acc, old.partial_ml = a.partial_ml;
      const double r_ms = MedianMs(20, [&] { cuda::LaunchAttention(old, 0); });
      fmt::print("{:<34} {:>12.1f} {:>12.1f} {:>12.1f}   (tensor splits {}, wgmma splits {}, row splits {})\n",
                 fmt::format("q_len {}", ql), t_ms * 1e3, w_ms * 1e3, r_ms * 1e3, a.num_splits,
                 wa.num_splits, old.num_splits);
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_prefill: {}\n", e.what());
    return 1;
  }
}
