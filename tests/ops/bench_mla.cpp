// CUDA MLA benchmark (one H200 run; docs/PERF.md "CUDA MLA"):
//  1. ceilings measured in this run: HBM bandwidth (device-to-device copy, read + write) and
//     the bf16 GEMM rate (cuBLASLt 8192^3);
//  2. absorbed decode attention (the latent kernel + split-K combine) for DeepSeek-V3 (128
//     heads) and DeepSeek-V2-Lite (16 heads) shapes, batch 1/8/32 x context 1K/8K/32K x q_len
//     1/4, bf16 and fp8 latent caches, against floor = max(latent bytes / bandwidth,
//     FLOPs / GEMM rate); and the whole MlaAttention op (W_UK fold + kernel + W_UV apply)
//     against (latent + w_kv_b bytes) / bandwidth;
//  3. expanded prefill: the FlashAttention kernel alone and the whole op (gather + expansion
//     GEMM + kernel) against FLOPs / GEMM rate.
// Caches (and w_kv_b) rotate over several copies so L2 (60 MB) does not hold them between
// calls. Times: CUDA-graph replays of 20 calls, median of 10, per call.
// Usage: bench_mla [--quick | --profile]   (--quick: a few shapes; --profile: two)
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "kernels/cuda/batch_plan.h"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/gemm/matmul_lt.h"
#include "kernels/cuda/mla/mla_params.h"
#include "kernels/ops_moe.h"

namespace pg::bench {
void FillBf16(void* p, int64_t n, uint32_t seed, float scale);
void FillFp8(void* p, int64_t n, uint32_t seed);
}

namespace {

using namespace pg;
using cuda::bf16;

struct Buf {
  void* p = nullptr;
  explicit Buf(size_t bytes) { PG_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 256))); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(p); }
};

using bench::MedianMs;
// Per-call milliseconds from CUDA-graph replay (bench_timing.h).
inline double GraphMs(const std::function<void(int)>& fn) { return bench::GraphMedianMs(fn); }

constexpr int kPage = 64;
constexpr int kNope = 128, kV = 128, kQk = kNope + cuda::kMlaRope;

// A batch of `seqs` sequences (q_len new tokens, kv_len history each) over its own pages,
// uploaded to the device.
struct Batch {
  std::vector<int32_t> q_start, q_len, kv_len, page_start, page_table;
  ops::AttentionBatch host;
  cuda::DeviceBatchPlan plan;
  Batch(int seqs, int q, int kv, int64_t first_page) {
    const int pps = (kv + kPage - 1) / kPage;
    for (int s = 0; s < seqs; ++s) {
      q_start.push_back(s * q), q_len.push_back(q), kv_len.push_back(kv);
      page_start.push_back(s * pps);
      for (int i = 0; i < pps; ++i) page_table.push_back(int32_t(first_page + int64_t(s) * pps + i));
    }
    host = {.num_seqs = seqs, .page_size = kPage, .q_start = q_start, .q_len = q_len,
            .kv_len = kv_len, .page_start = page_start, .page_table = page_table};
    plan.Upload(host, 0);
    PG_CUDA_CHECK(cudaDeviceSynchronize());
    host.device = &plan.view();
  }
};

struct Ceilings {
  double bw_gbs = 0, gemm_tflops = 0;
};

Ceilings Measure() {
  Ceilings c;
  const size_t bytes = size_t(2) << 30;
  {
    Buf src(bytes), dst(bytes);
    bench::FillBf16(src.p, int64_t(bytes / 2), 1, 1.0f);
    const double ms = MedianMs(10, [&](int) {
      PG_CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice, 0));
    });
    c.bw_gbs = 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
  }
  {
    const int64_t s = 8192;
    Buf x(size_t(s * s * 2)), w(size_t(s * s * 2)), o(size_t(s * s * 2));
    bench::FillBf16(x.p, s * s, 2, 1.0f);
    bench::FillBf16(w.p, s * s, 3, 1.0f);
    cuda::LtGemmArgs g{x.as<bf16>(), w.as<bf16>(), o.as<bf16>(), s, s, s, s, s, s, false};
    const double ms = MedianMs(10, [&](int) { PG_ENSURE(cuda::LtMatmul(g, 0), kInternal, "no algo"); });
    c.gemm_tflops = 2.0 * double(s) * s * s / (ms * 1e-3) / 1e12;
  }
  fmt::print("HBM d2d copy: {:.1f} GB/s; bf16 GEMM 8192^3: {:.1f} TFLOP/s\n", c.bw_gbs,
             c.gemm_tflops);
  return c;
}

void BenchDecode(const Ceilings& ceil, int heads, int q_len, int batch, int ctx, bool fp8) {
  const int64_t elem = fp8 ? 1 : 2;
  const int64_t pps = (ctx + kPage - 1) / kPage;
  const int64_t latent_bytes = int64_t(batch) * ctx * cuda::kMlaLatent * elem;
  const int copies = int(std::clamp<int64_t>((int64_t(512) << 20) / latent_bytes + 1, 1, 16));
  const int64_t pages = int64_t(copies) * batch * pps;
  Buf kc(size_t(pages * kPage * cuda::kMlaHalf * elem)), vc(size_t(pages * kPage * cuda::kMlaHalf * elem));
  if (fp8) {
    bench::FillFp8(kc.p, pages * kPage * cuda::kMlaHalf, 7);
    bench::FillFp8(vc.p, pages * kPage * cuda::kMlaHalf, 8);
  } else {
    bench::FillBf16(kc.p, pages * kPage * cuda::kMlaHalf, 7, 1.0f);
    bench::FillBf16(vc.p, pages * kPage * cuda::kMlaHalf, 8, 1.0f);
  }
  std::vector<std::unique_ptr<Batch>> batches;
  for (int c = 0; c < copies; ++c)
    batches.push_back(std::make_unique<Batch>(batch, q_len, ctx, int64_t(c) * batch * pps));
  const int64_t T = int64_t(batch) * q_len;
  const cuda::MlaDecodePlan plan =
      cuda::PlanMlaDecode(batch, q_len, ctx, heads, cuda::MultiprocessorCount());
  // The same with twice the split target (is one wave of blocks the right target?).
  const cuda::MlaDecodePlan plan2 =
      cuda::PlanMlaDecode(batch, q_len, ctx, heads, 2 * cuda::MultiprocessorCount());
  Buf q_lat(size_t(T * heads * cuda::kMlaLatent * 2)), o_lat(size_t(T * heads * cuda::kMlaRank * 2));
  bench::FillBf16(q_lat.p, T * heads * cuda::kMlaLatent, 9, 0.05f);
  const size_t parts = size_t(T * heads) * size_t(std::max(plan.num_splits, plan2.num_splits));
  Buf acc(parts * cuda::kMlaRank * 4), ml(parts * 2 * 4);
  cuda::MlaDecodeArgs a{};
  a.q_lat = q_lat.as<bf16>();
  a.k_cache = kc.p;
  a.v_cache = vc.p;
  a.o_lat = o_lat.as<bf16>();
  a.partial_acc = acc.as<float>();
  a.partial_ml = ml.as<float>();
  a.heads = heads;
  a.row_groups = plan.row_groups;
  a.num_splits = plan.num_splits;
  a.logit_scale_log2 = 0.1f;
  a.cache_type = fp8 ? cuda::MlaCacheType::kFP8 : cuda::MlaCacheType::kBF16;
  a.k_scale = a.v_scale = 1.0f;
  auto time_plan = [&](const cuda::MlaDecodePlan& pl) {
    a.row_groups = pl.row_groups;
    a.num_splits = pl.num_splits;
    a.min_chunk = pl.min_chunk;
    return GraphMs([&](int i) {
      a.batch = batches[size_t(i % copies)]->plan.view();
      cudaStream_t st = cuda::CurrentStream();
      cuda::LaunchMlaDecode(a, st);
      if (a.num_splits > 1)
        cuda::LaunchMlaCombine(
            {a.partial_acc, a.partial_ml, a.o_lat, a.batch, heads, a.num_splits, a.min_chunk}, st);
    });
  };
  const double kernel_ms = time_plan(plan);
  const double kernel2_ms = plan2.num_splits != plan.num_splits ? time_plan(plan2) : kernel_ms;
  PG_CUDA_CHECK(cudaGetLastError());

  // The whole op: w_kv_b rotates over 4 copies too.
  const int64_t w_elems = int64_t(heads) * (kNope + kV) * cuda::kMlaRank;
  constexpr int kWCopies = 4;
  Buf w(size_t(w_elems * 2 * kWCopies)), q(size_t(T * heads * kQk * 2)), out(size_t(T * heads * kV * 2));
  bench::FillBf16(w.p, w_elems * kWCopies, 10, 0.05f);
  bench::FillBf16(q.p, T * heads * kQk, 11, 1.0f);
  const DType cdt = fp8 ? DType::kF8E4M3 : DType::kBF16;
  auto cache_view = [&](void* p) {
    return TensorView::Contiguous(p, cdt, {pages, kPage, 1, cuda::kMlaHalf}, Device::kCuda);
  };
  ops::MlaAttentionParams p{};
  p.q = TensorView::Contiguous(q.p, DType::kBF16, {T, heads, kQk}, Device::kCuda);
  p.out = TensorView::Contiguous(out.p, DType::kBF16, {T, heads, kV}, Device::kCuda);
  p.cache = {cache_view(kc.p), cache_view(vc.p), 1.0f, 1.0f};
  p.kv_lora_rank = cuda::kMlaRank;
  p.rope_dim = cuda::kMlaRope;
  p.mode = ops::MlaMode::kAbsorbed;
  const double op_ms = GraphMs([&](int i) {
    p.w_kv_b = TensorView::Contiguous(w.as<bf16>() + (i % kWCopies) * w_elems, DType::kBF16,
                                      {int64_t(heads) * (kNope + kV), cuda::kMlaRank}, Device::kCuda);
    p.batch = &batches[size_t(i % copies)]->host;
    ops::MlaAttention(p);
  });

  // The op as the models run it at decode: q RoPE and the step's cache write (kv_a norm +
  // k_pe RoPE + latent write) fused in (at <= 4 tokens: three kernels in all).
  Buf lat(size_t(T * cuda::kMlaLatent * 2)), nw(size_t(cuda::kMlaRank * 4)), pos(size_t(T * 4));
  bench::FillBf16(lat.p, T * cuda::kMlaLatent, 12, 1.0f);
  {
    const std::vector<float> ones(cuda::kMlaRank, 1.0f);
    std::vector<int32_t> positions;
    for (int s = 0; s < batch; ++s)
      for (int i = 0; i < q_len; ++i) positions.push_back(ctx - q_len + i);
    PG_CUDA_CHECK(cudaMemcpy(nw.p, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice));
    PG_CUDA_CHECK(cudaMemcpy(pos.p, positions.data(), positions.size() * 4, cudaMemcpyHostToDevice));
  }
  ops::RopeConfig rope_cfg{};
  rope_cfg.rotary_dim = cuda::kMlaRope;
  ops::MlaCacheWriteParams wp{
      .latent = TensorView::Contiguous(lat.p, DType::kBF16, {T, cuda::kMlaLatent}, Device::kCuda),
      .cache = p.cache,
      .norm_weight = TensorView::Contiguous(nw.p, DType::kF32, {cuda::kMlaRank}, Device::kCuda),
      .kv_lora_rank = cuda::kMlaRank,
      .positions = TensorView::Contiguous(pos.p, DType::kI32, {T}, Device::kCuda),
      .rope = rope_cfg};
  const double op_write_ms = GraphMs([&](int i) {
    p.w_kv_b = TensorView::Contiguous(w.as<bf16>() + (i % kWCopies) * w_elems, DType::kBF16,
                                      {int64_t(heads) * (kNope + kV), cuda::kMlaRank}, Device::kCuda);
    p.batch = wp.batch = &batches[size_t(i % copies)]->host;
    p.positions = wp.positions;
    p.rope = rope_cfg;
    p.write = &wp;
    ops::MlaAttention(p);
  });
  p.write = nullptr;
  p.positions = TensorView{};

  // At <= 4 tokens, each of the op's three kernels alone (graph of 20 calls of one kernel:
  // its latency as a chain, PDL overlapping its own prologue): q-absorb with the kv prep,
  // the decode kernel, merge + W_UV (reading the decode's partials).
  std::string breakdown;
  if (T <= cuda::kMlaFoldMaxTokens) {
    Buf q_lat2(size_t(T * heads * cuda::kMlaLatent * 2));
    cuda::MlaQAbsorbArgs qa{};
    qa.q = q.as<bf16>(), qa.w = w.as<bf16>(), qa.q_lat = q_lat2.as<bf16>();
    qa.positions = pos.as<int32_t>();
    qa.q_stride = int64_t(heads) * kQk, qa.ldw = cuda::kMlaRank, qa.w_head = kNope + kV;
    qa.tokens = int(T), qa.heads = heads, qa.nope = kNope, qa.rope = cuda::kMlaRope,
    qa.rank = cuda::kMlaRank, qa.neox = true;
    for (int i = 0; i < cuda::kMlaRope / 2; ++i) qa.inv_freq[i] = std::pow(10000.0f, -2.0f * i / cuda::kMlaRope);
    qa.with_prep = true;
    cuda::MlaKvPrepArgs& pr = qa.prep;
    pr.write = {lat.as<bf16>(), kc.p, vc.p, batches[0]->plan.view(), cuda::kMlaLatent,
                cuda::kMlaLatent, cuda::kMlaHalf,
                fp8 ? cuda::MlaCacheType::kFP8 : cuda::MlaCacheType::kBF16, 1.0f, 1.0f};
    pr.norm_weight = nw.p, pr.norm_type = cuda::WeightType::kF32, pr.eps = 1e-6f;
    pr.positions = pos.as<int32_t>(), pr.rank = cuda::kMlaRank, pr.neox = true;
    std::copy(qa.inv_freq, qa.inv_freq + cuda::kMlaRope / 2, pr.inv_freq);
    const double qabs_ms = GraphMs([&](int i) {
      qa.w = w.as<bf16>() + (i % kWCopies) * w_elems;
      qa.prep.write.batch = batches[size_t(i % copies)]->plan.view();
      PG_ENSURE(cuda::LaunchMlaQAbsorb(qa, cuda::CurrentStream()), kInternal, "q-absorb refused");
    });
    a.row_groups = plan.row_groups, a.num_splits = plan.num_splits, a.min_chunk = plan.min_chunk;
    const double dec_ms = GraphMs([&](int i) {
      a.batch = batches[size_t(i % copies)]->plan.view();
      cuda::LaunchMlaDecode(a, cuda::CurrentStream());
    });
    cuda::MlaCombineApplyArgs ca{{a.partial_acc, a.partial_ml, a.o_lat, a.batch, heads, a.num_splits,
                                  a.min_chunk},
                                 nullptr, out.as<bf16>(), cuda::kMlaRank, kNope + kV,
                                 int64_t(heads) * kV, int(T), kV};
    const double apply_ms = GraphMs([&](int i) {
      ca.w = w.as<bf16>() + (i % kWCopies) * w_elems + int64_t(kNope) * cuda::kMlaRank;
      ca.combine.batch = batches[size_t(i % copies)]->plan.view();
      PG_ENSURE(cuda::LaunchMlaCombineApply(ca, cuda::CurrentStream()), kInternal, "apply refused");
    });
    PG_CUDA_CHECK(cudaGetLastError());
    breakdown = fmt::format(" | alone: q-absorb+prep {:.1f}, decode {:.1f}, merge+W_UV {:.1f} us",
                            qabs_ms * 1e3, dec_ms * 1e3, apply_ms * 1e3);
  }

  // Causal keys per row: q_len rows at positions ctx - q_len .. ctx - 1.
  const double keys = double(batch) * heads * (double(q_len) * ctx - q_len * (q_len - 1) / 2.0);
  const double flops = 2.0 * keys * (cuda::kMlaLatent + cuda::kMlaRank);
  const double bytes_floor_ms = double(latent_bytes) / (ceil.bw_gbs * 1e9) * 1e3;
  const double flop_floor_ms = flops / (ceil.gemm_tflops * 1e12) * 1e3;
  const double floor_ms = std::max(bytes_floor_ms, flop_floor_ms);
  const double op_floor_ms = double(latent_bytes + w_elems * 2) / (ceil.bw_gbs * 1e9) * 1e3;
  fmt::print(
      "decode heads {:3} q_len {} batch {:2} ctx {:5} {}: kernel {:8.1f} us (floor {:7.1f} us = max(bytes {:.1f}, "
      "flops {:.1f}); {:5.1f}% ; {:.0f} GB/s {:.0f} TFLOP/s; splits {}; 2x target: {} splits {:.1f} us) | op {:8.1f} us (bytes floor {:.1f} us, {:5.1f}%) | op+write {:.1f} us{}\n",
      heads, q_len, batch, ctx, fp8 ? "fp8 " : "bf16", kernel_ms * 1e3, floor_ms * 1e3,
      bytes_floor_ms * 1e3, flop_floor_ms * 1e3, 100.0 * floor_ms / kernel_ms,
      double(latent_bytes) / (kernel_ms * 1e-3) / 1e9, flops / (kernel_ms * 1e-3) / 1e12,
      plan.num_splits, plan2.num_splits, kernel2_ms * 1e3, op_ms * 1e3, op_floor_ms * 1e3,
      100.0 * op_floor_ms / op_ms, op_write_ms * 1e3, breakdown);
}

void BenchPrefill(const Ceilings& ceil, int heads, int seqs, int q_len, int kv_len) {
  const int64_t pps = (kv_len + kPage - 1) / kPage, pages = int64_t(seqs) * pps;
  const int64_t T = int64_t(seqs) * q_len, hist = int64_t(seqs) * kv_len;
  Buf kc(size_t(pages * kPage * cuda::kMlaHalf * 2)), vc(size_t(pages * kPage * cuda::kMlaHalf * 2));
  bench::FillBf16(kc.p, pages * kPage * cuda::kMlaHalf, 1, 1.0f);
  bench::FillBf16(vc.p, pages * kPage * cuda::kMlaHalf, 2, 1.0f);
  Batch b(seqs, q_len, kv_len, 0);
  const int64_t per_head = kNope + kV;
  Buf q(size_t(T * heads * kQk * 2)), out(size_t(T * heads * kV * 2)),
      kv(size_t(hist * heads * per_head * 2)), rope(size_t(hist * cuda::kMlaLatent * 2)),
      hs(size_t(seqs) * 4), w(size_t(heads * per_head * cuda::kMlaRank * 2));
  bench::FillBf16(q.p, T * heads * kQk, 3, 1.0f);
  bench::FillBf16(kv.p, hist * heads * per_head, 4, 1.0f);
  bench::FillBf16(rope.p, hist * cuda::kMlaLatent, 5, 1.0f);
  bench::FillBf16(w.p, heads * per_head * cuda::kMlaRank, 6, 0.05f);
  std::vector<int32_t> hist_start;
  for (int s = 0; s < seqs; ++s) hist_start.push_back(s * kv_len);
  PG_CUDA_CHECK(cudaMemcpy(hs.p, hist_start.data(), hist_start.size() * 4, cudaMemcpyHostToDevice));
  cuda::MlaPrefillArgs a{};
  a.q = q.as<bf16>();
  a.kv = kv.as<bf16>();
  a.rope = rope.as<bf16>() + cuda::kMlaRank;
  a.out = out.as<bf16>();
  a.hist_start = hs.as<int32_t>();
  a.batch = b.plan.view();
  a.q_stride = int64_t(heads) * kQk;
  a.rope_stride = cuda::kMlaLatent;
  a.out_stride = int64_t(heads) * kV;
  a.heads = heads;
  a.max_q_len = q_len;
  a.logit_scale_log2 = 0.1f;
  const double kernel_ms = GraphMs([&](int) {
    cuda::LaunchMlaPrefill(a, kNope, cuda::kMlaRope, kV, cuda::CurrentStream());
  });
  PG_CUDA_CHECK(cudaGetLastError());
  ops::MlaAttentionParams p{};
  p.q = TensorView::Contiguous(q.p, DType::kBF16, {T, heads, kQk}, Device::kCuda);
  p.out = TensorView::Contiguous(out.p, DType::kBF16, {T, heads, kV}, Device::kCuda);
  p.w_kv_b = TensorView::Contiguous(w.p, DType::kBF16, {heads * per_head, cuda::kMlaRank}, Device::kCuda);
  auto cv = [&](void* ptr) {
    return TensorView::Contiguous(ptr, DType::kBF16, {pages, kPage, 1, cuda::kMlaHalf}, Device::kCuda);
  };
  p.cache = {cv(kc.p), cv(vc.p), 1.0f, 1.0f};
  p.batch = &b.host;
  p.kv_lora_rank = cuda::kMlaRank;
  p.rope_dim = cuda::kMlaRope;
  p.mode = ops::MlaMode::kExpanded;
  const double op_ms = GraphMs([&](int) { ops::MlaAttention(p); });
  // Causal: row i of a sequence sees kv_len - q_len + i + 1 keys.
  const double keys = double(seqs) * heads * (double(q_len) * (kv_len - q_len) + q_len * (q_len + 1) / 2.0);
  const double attn_flops = 2.0 * keys * (kQk + kV);
  const double gemm_flops = 2.0 * double(hist) * cuda::kMlaRank * double(heads) * per_head;
  const double floor_ms = attn_flops / (ceil.gemm_tflops * 1e12) * 1e3;
  const double op_floor_ms = (attn_flops + gemm_flops) / (ceil.gemm_tflops * 1e12) * 1e3;
  fmt::print(
      "prefill heads {:3} seqs {} q_len {:5} kv_len {:5}: kernel {:8.1f} us ({:.0f} TFLOP/s, floor {:.1f} us, "
      "{:5.1f}%) | op {:8.1f} us (floor {:.1f} us, {:5.1f}%)\n",
      heads, seqs, q_len, kv_len, kernel_ms * 1e3, attn_flops / (kernel_ms * 1e-3) / 1e12,
      floor_ms * 1e3, 100.0 * floor_ms / kernel_ms, op_ms * 1e3, op_floor_ms * 1e3,
      100.0 * op_floor_ms / op_ms);
}

}  // namespace

namespace pg::bench {
// The benchmark's entry point (also linked into tests/models' mla_gpu_check, which carries the
// MLA tests, goldens and benchmarks of one GPU job in one binary).
int RunMlaBench(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  // --profile: one decode shape and one prefill shape (for a profiler's first launches).
  const bool profile = argc > 1 && std::strcmp(argv[1], "--profile") == 0;
  try {
    cudaDeviceProp prop{};
    PG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    fmt::print("device: {} ({} SMs)\n", prop.name, prop.multiProcessorCount);
    const Ceilings c = Measure();
    if (profile) {
      BenchDecode(c, 128, 1, 8, 8192, false);
      BenchPrefill(c, 128, 1, 4096, 4096);
      return 0;
    }
    // --decode-only: no prefill rows; --heads, --batch, --ctx, --q-len (comma lists), --bf16:
    // only those decode shapes.
    bool decode_only = false, bf16_only = false;
    std::vector<int> head_counts = {128, 16}, q_lens = {1, 4};
    std::vector<int> batches = quick ? std::vector<int>{1, 32} : std::vector<int>{1, 8, 32};
    std::vector<int> ctxs = quick ? std::vector<int>{1024, 32768} : std::vector<int>{1024, 8192, 32768};
    for (int i = 1; i < argc; ++i) {
      const bool has = i + 1 < argc;
      if (std::strcmp(argv[i], "--decode-only") == 0) decode_only = true;
      if (std::strcmp(argv[i], "--bf16") == 0) bf16_only = true;
      if (std::strcmp(argv[i], "--heads") == 0 && has) head_counts = CommaInts(argv[i + 1]);
      if (std::strcmp(argv[i], "--batch") == 0 && has) batches = CommaInts(argv[i + 1]);
      if (std::strcmp(argv[i], "--ctx") == 0 && has) ctxs = CommaInts(argv[i + 1]);
      if (std::strcmp(argv[i], "--q-len") == 0 && has) q_lens = CommaInts(argv[i + 1]);
    }
    for (int heads : head_counts)
      for (int q_len : q_lens)
        for (int batch : batches)
          for (int ctx : ctxs)
            for (bool fp8 : {false, true}) {
              if ((quick && fp8 && ctx != 32768) || (bf16_only && fp8)) continue;
              BenchDecode(c, heads, q_len, batch, ctx, fp8);
            }
    for (int heads : head_counts) {
      if (decode_only) break;
      BenchPrefill(c, heads, 1, 4096, 4096);
      BenchPrefill(c, heads, 4, 1024, 2048);
      if (!quick) BenchPrefill(c, heads, 1, 512, 512);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_mla: {}\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace pg::bench

#ifndef PG_MLA_BENCH_NO_MAIN
int main(int argc, char** argv) { return pg::bench::RunMlaBench(argc, argv); }
#endif
