// Dense decode projections against the HBM floor (issue 6), one H200 run:
//  1. the HBM rate measured in this run (cudaMemcpy device-to-device, read + written);
//  2. each Llama-3.1-8B matrix alone at batch 1 and 4: Matmul (GEMV path) and, where the
//     model fuses it, FusedMatmul (RMSNorm prologue / SwiGLU epilogue), per-call kernel time
//     from CUDA-graph replay over weight copies rotating through > 256 MiB (L2 holds none);
//  3. the 32-layer projection stack of one decode step (no attention): the unfused op
//     sequence (RmsNorm, qkv, o, RmsNorm + residual, gate_up, SwiGlu, down) against the fused
//     one (FusedMatmul qkv, o accumulating, FusedMatmul gate_up + SwiGLU, down accumulating),
//     floor = the stack's weight bytes / HBM rate.
// floor/t is floor over measured time. PEREGRINE_PDL=0 turns PDL off (run it both ways).
// Every number is taken twice in the same process: gemv.cu's warp kernel ("warp") and the
// ring GEMV ("ring", gemv_ring.cu), through cuda::SetGemvRingMode; the single matrices also
// cover Qwen3-30B-A3B's (hidden 2048) attention projections, MoE router and lm_head.
//  4. fp8 e4m3 weights (Llama per-tensor, DeepSeek-V3 128x128 blocks) at 1 / 4 / 8 rows: the
//     f32-FMA GEMV against the tensor-core variants (cuda::SetFp8GemvVariant), same process.
//  5. bf16 weights at 1-8 rows: the tensor-core ring GEMV (fp8_ring_mma.cu's bf16 kernel,
//     cuda::SetBf16RingMmaMode kOn) against what runs without it (warp / ring GEMV at <= 4 rows,
//     cuBLASLt at 5-8); PEREGRINE_BENCH_GEMV_ROWS_ONLY=1 runs this table alone.
// Env: PEREGRINE_BENCH_GEMV_SINGLE_ONLY=1 runs table 2 alone, PEREGRINE_BENCH_GEMV_MATCH=<text>
// only its matrices whose name holds <text>, PEREGRINE_BENCH_GEMV_HOT=1 one weight copy (the
// L2 holds what fits: with gemv_ring.cu's PEREGRINE_GEMV_RING_SKIP_LOADS=1, a probe of the ring
// consumers' own pace; docs/PERF.md "Session 14").
// Also linked into tests/models' gemv_gpu_check (--bench-gemv) with PG_GEMV_BENCH_NO_MAIN.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "core/env.h"
#include "kernels/cuda/ceilings.h"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/gemm/fp8_ring_mma.h"
#include "kernels/cuda/gemm/gemv_ring.h"
#include "kernels/cuda/moe/moe_params.h"
#include "kernels/ops.h"
#include "kernels/ops_fused.h"

namespace pg::bench {
void FillBf16(void* p, int64_t n, uint32_t seed, float scale);
}

namespace {

using namespace pg;
using bench::DeviceBuf;
using bench::GraphMedianMs;

TensorView Dev(void* p, std::initializer_list<int64_t> shape) {
  return TensorView::Contiguous(p, DType::kBF16, shape, Device::kCuda);
}

constexpr int64_t kHidden = 4096, kQkv = 6144, kInter = 14336, kVocab = 128256;
constexpr int kLayers = 32;

struct Matrix {
  const char* name;
  int64_t m, k;
  enum Fuse { kNone, kNorm, kNormSwiGlu, kAccumulate, kF32Out } fuse;
};

// Runs fn with the ring GEMV off, then on; restores the mode. The tensor-core ring kernel
// (2-4 rows by shape, table 5) stays off meanwhile, so "warp" is gemv.cu's warp kernel.
template <typename F>
std::pair<double, double> WarpAndRing(F&& fn) {
  const pg::cuda::Bf16RingMmaMode mma = pg::cuda::GetBf16RingMmaMode();
  pg::cuda::SetBf16RingMmaMode(pg::cuda::Bf16RingMmaMode::kOff);
  const pg::cuda::GemvRingMode mode = pg::cuda::GetGemvRingMode();
  pg::cuda::SetGemvRingMode(pg::cuda::GemvRingMode::kOff);
  const double warp = fn();
  pg::cuda::SetGemvRingMode(pg::cuda::GemvRingMode::kOn);
  const double ring = fn();
  pg::cuda::SetGemvRingMode(mode);
  pg::cuda::SetBf16RingMmaMode(mma);
  return {warp, ring};
}

// One matrix's bench inputs for up to max_rows rows: weight copies rotating through > 256 MiB
// (so the L2 holds none of them), x, out (f32-sized), the composition's scratch; and the
// per-call time of the model's op at n rows (FusedMatmul for the norm / swiglu matrices, else
// Matmul; graph replay), so every table times the same thing.
struct Projection {
  const Matrix& mt;
  TensorView norm_weight;  // [mt.k]
  std::vector<std::unique_ptr<DeviceBuf>> ws;
  DeviceBuf x, out, normed, proj;
  Projection(const Matrix& m, int64_t max_rows, const TensorView& nw, uint32_t seed)
      : mt(m), norm_weight(nw), x(size_t(max_rows * m.k * 2)), out(size_t(max_rows * m.m * 4)),
        normed(size_t(max_rows * m.k * 2)), proj(size_t(max_rows * m.m * 2)) {
    // PEREGRINE_BENCH_GEMV_HOT=1: one copy, so the L2 holds what fits of it (~50 MB on an H200).
    static const bool hot = EnvFlag("PEREGRINE_BENCH_GEMV_HOT", false);
    const int copies = hot ? 1 : int(std::max<size_t>(1, (size_t(256) << 20) / WeightBytes() + 1));
    for (int c = 0; c < copies; ++c) {
      ws.push_back(std::make_unique<DeviceBuf>(WeightBytes()));
      pg::bench::FillBf16(ws.back()->p, m.m * m.k, seed + uint32_t(c), 0.02f);
    }
    pg::bench::FillBf16(x.p, max_rows * m.k, 7, 1.0f);
    pg::bench::FillBf16(out.p, max_rows * m.m, 8, 1.0f);
  }
  size_t WeightBytes() const { return size_t(mt.m * mt.k * 2); }
  bool Accumulates() const { return mt.fuse == Matrix::kAccumulate; }
  int64_t Outputs() const { return mt.fuse == Matrix::kNormSwiGlu ? mt.m / 2 : mt.m; }
  // Weight + x + out bytes at n rows (out read too when accumulating).
  double FloorBytes(int64_t n) const {
    const int out_bytes = mt.fuse == Matrix::kF32Out ? 4 : 2;
    return double(WeightBytes()) + double(n * mt.k * 2) + double(n * Outputs() * out_bytes) * (Accumulates() ? 2 : 1);
  }
  double TimeMs(int64_t n) {
    auto w_of = [&](int i) { return Dev(ws[size_t(i) % ws.size()]->p, {mt.m, mt.k}); };
    const bool sw = mt.fuse == Matrix::kNormSwiGlu;
    if (mt.fuse == Matrix::kNorm || sw)
      return GraphMedianMs([&](int i) {
        ops::FusedMatmul({.x = Dev(x.p, {n, mt.k}), .norm_weight = norm_weight, .w = w_of(i), .swiglu = sw,
                          .out = Dev(out.p, {n, Outputs()}), .normed = Dev(normed.p, {n, mt.k}),
                          .projected = Dev(proj.p, {n, mt.m})});
      });
    const TensorView o = mt.fuse == Matrix::kF32Out
                             ? TensorView::Contiguous(out.p, DType::kF32, {n, mt.m}, Device::kCuda)
                             : Dev(out.p, {n, mt.m});
    return GraphMedianMs([&](int i) {
      ops::Matmul({.x = Dev(x.p, {n, mt.k}), .w = w_of(i), .out = o, .accumulate = Accumulates()});
    });
  }
};

}  // namespace

namespace pg::bench {

// Llama-3.1-8B's fused fp8 projections (FusedMatmul, per-tensor scale): "old" = the
// composition with the previous GEMV (Fp8GemvVariant::ring 0: RmsNorm, Fp8GemvMmaKernel,
// SwiGlu), "ring" = the composition with the ring GEMV (RunFusedMatmulComposed), "fused" =
// the ring kernel with the norm prologue / SwiGLU epilogue (cuda_fp8_ring). Floor: weight +
// x + out bytes.
static void RunFp8FusedBench(double bw, void* norm_w) {
  struct Fused {
    const char* name;
    int64_t m, k;
    bool swiglu, block;
  };
  // DeepSeek-V3's (hidden 7168, 128x128 block scales): q_a + kv_a after input_layernorm, the
  // dense layers' gate_up + SwiGLU after post_attention_layernorm.
  const Fused mats[] = {{"fp8 qkv 6144x4096 +norm", kQkv, kHidden, false, false},
                        {"fp8 gate_up 28672x4096 +norm+swiglu", 2 * kInter, kHidden, true, false},
                        {"v3 q_a+kv_a 2112x7168 +norm blk", 2112, 7168, false, true},
                        {"v3 gate_up 36864x7168 +norm+swiglu blk", 36864, 7168, true, true}};
  DeviceBuf norm7168(7168 * 2);
  FillBf16(norm7168.p, 7168, 3, 1.0f);
  (void)norm_w;
  const pg::cuda::Fp8GemvVariant saved = pg::cuda::GetFp8GemvVariant();
  fmt::print("\nfp8 fused projections, us per call (old = RmsNorm + d4c1i GEMV (+ SwiGlu); ring = the "
             "same composition on the ring GEMV; fused = one ring kernel)\n");
  fmt::print("{:<36} {:>5} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}\n", "matrix", "batch", "old", "ring",
             "fused", "floor_us", "old/fl", "fused/fl");
  for (const Fused& mt : mats) {
    const size_t wbytes = size_t(mt.m * mt.k);
    const int copies = int(std::max<size_t>(1, (size_t(256) << 20) / wbytes + 1));
    std::vector<std::unique_ptr<DeviceBuf>> ws;
    for (int c = 0; c < copies; ++c) {
      ws.push_back(std::make_unique<DeviceBuf>(wbytes));
      FillBf16(ws.back()->p, mt.m * mt.k / 2, 40 + c, 0.02f);
    }
    const int64_t sm = mt.block ? (mt.m + 127) / 128 : 1, sk = mt.block ? (mt.k + 127) / 128 : 1;
    DeviceBuf scale(size_t(sm * sk * 4));
    const std::vector<float> ones(size_t(sm * sk), 1.0f);
    PG_CUDA_CHECK(cudaMemcpy(scale.p, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice));
    const TensorView sv = mt.block ? TensorView::Contiguous(scale.p, DType::kF32, {sm, sk}, Device::kCuda)
                                   : TensorView::Contiguous(scale.p, DType::kF32, {1}, Device::kCuda);
    const int64_t out_m = mt.swiglu ? mt.m / 2 : mt.m;
    for (int64_t n : {1, 4, 8}) {
      DeviceBuf x(size_t(n * mt.k * 2)), out(size_t(n * out_m * 2)), normed(size_t(n * mt.k * 2)),
          proj(size_t(n * mt.m * 2));
      FillBf16(x.p, n * mt.k, 7, 1.0f);
      auto params = [&](int i) {
        return ops::FusedMatmulParams{
            .x = Dev(x.p, {n, mt.k}), .norm_weight = Dev(norm7168.p, {mt.k}),
            .w = TensorView::Contiguous(ws[size_t(i % copies)]->p, DType::kF8E4M3, {mt.m, mt.k}, Device::kCuda),
            .w_scale = sv, .swiglu = mt.swiglu, .out = Dev(out.p, {n, out_m}),
            .normed = Dev(normed.p, {n, mt.k}), .projected = Dev(proj.p, {n, mt.m})};
      };
      pg::cuda::Fp8GemvVariant v = saved;
      v.ring = 0;
      pg::cuda::SetFp8GemvVariant(v);
      const double old_ms = GraphMedianMs([&](int i) { ops::RunFusedMatmulComposed(params(i), false); });
      v.ring = 1;  // the ring wherever it fits (whatever the shape policy says)
      pg::cuda::SetFp8GemvVariant(v);
      const double ring_ms = GraphMedianMs([&](int i) { ops::RunFusedMatmulComposed(params(i), false); });
      const double fused_ms = GraphMedianMs([&](int i) { ops::FusedMatmul(params(i)); });
      const double floor_ms = (double(wbytes) + double(n * mt.k * 2) + double(n * out_m * 2)) / bw * 1e3;
      fmt::print("{:<36} {:>5} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>7.1f}% {:>7.1f}%\n", mt.name, n,
                 old_ms * 1e3, ring_ms * 1e3, fused_ms * 1e3, floor_ms * 1e3, 100 * floor_ms / old_ms,
                 100 * floor_ms / fused_ms);
    }
  }
  pg::cuda::SetFp8GemvVariant(saved);
}

// Table 5: bf16 projections (Llama-3.1-8B, Qwen3-30B-A3B attention) at 1-8 rows, "old" =
// Bf16RingMmaMode kOff (the warp / ring GEMV at <= 4 rows, cuBLASLt at 5-8), "mma" = kOn (the
// tensor-core ring kernel at every row count). Floor: weight + x + out bytes (out twice with
// accumulate).
static void RunBf16RowsBench(double bw, const TensorView& nw4096, const TensorView& nw2048) {
  const Matrix mats[] = {{"qkv 6144x4096 +norm", kQkv, kHidden, Matrix::kNorm},
                         {"o 4096x4096 +=", kHidden, kHidden, Matrix::kAccumulate},
                         {"gate_up 28672x4096 +norm+swiglu", 2 * kInter, kHidden, Matrix::kNormSwiGlu},
                         {"down 4096x14336 +=", kHidden, kInter, Matrix::kAccumulate},
                         {"q3moe qkv 5120x2048 +norm", 5120, 2048, Matrix::kNorm},
                         {"q3moe o 2048x4096 +=", 2048, 4096, Matrix::kAccumulate}};
  const pg::cuda::Bf16RingMmaMode saved = pg::cuda::GetBf16RingMmaMode();
  fmt::print("\nbf16 GEMV at 1-8 rows, us per call (old = warp/ring GEMV <= 4 rows, cuBLASLt 5-8; "
             "mma = tensor-core ring)\n");
  fmt::print("{:<32} {:>5} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8}\n", "matrix", "batch", "old_us", "mma_us",
             "floor_us", "old/fl", "mma/fl", "old/mma");
  for (const Matrix& mt : mats) {
    Projection pr(mt, 8, mt.k == kHidden ? nw4096 : nw2048, 60);
    for (int64_t n : {1, 2, 4, 6, 8}) {
      pg::cuda::SetBf16RingMmaMode(pg::cuda::Bf16RingMmaMode::kOff);
      const double old_ms = pr.TimeMs(n);
      pg::cuda::SetBf16RingMmaMode(pg::cuda::Bf16RingMmaMode::kOn);
      const double mma_ms = pr.TimeMs(n);
      const double floor_ms = pr.FloorBytes(n) / bw * 1e3;
      fmt::print("{:<32} {:>5} {:>9.2f} {:>9.2f} {:>9.2f} {:>7.1f}% {:>7.1f}% {:>8.2f}\n", mt.name, n,
                 old_ms * 1e3, mma_ms * 1e3, floor_ms * 1e3, 100 * floor_ms / old_ms, 100 * floor_ms / mma_ms,
                 old_ms / mma_ms);
    }
  }
  pg::cuda::SetBf16RingMmaMode(saved);
}

int RunGemvBench() {
  try {
    cudaDeviceProp prop{};
    PG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const double bw = cuda::MeasureHbmBytesPerS();
    fmt::print("device: {} ({} SMs); HBM d2d copy {:.1f} GB/s; PDL {}\n", prop.name,
               prop.multiProcessorCount, bw / 1e9, cuda::PdlEnabled() ? "on" : "off");
    DeviceBuf norm_w(size_t(kHidden) * 2);
    bench::FillBf16(norm_w.p, kHidden, 3, 1.0f);
    const TensorView nw = Dev(norm_w.p, {kHidden});
    if (EnvFlag("PEREGRINE_BENCH_GEMV_ROWS_ONLY", false)) {
      RunBf16RowsBench(bw, nw, Dev(norm_w.p, {2048}));
      return 0;
    }

    // ---- each matrix alone -----------------------------------------------------------------
    const Matrix mats[] = {{"qkv 6144x4096 +norm", kQkv, kHidden, Matrix::kNorm},
                           {"o 4096x4096 +=", kHidden, kHidden, Matrix::kAccumulate},
                           {"gate_up 28672x4096 +norm+swiglu", 2 * kInter, kHidden, Matrix::kNormSwiGlu},
                           {"down 4096x14336 +=", kHidden, kInter, Matrix::kAccumulate},
                           {"lm_head 128256x4096 +norm", kVocab, kHidden, Matrix::kNorm},
                           {"q3moe qkv 5120x2048 +norm", 5120, 2048, Matrix::kNorm},
                           {"q3moe o 2048x4096 +=", 2048, 4096, Matrix::kAccumulate},
                           {"q3moe router 128x2048 f32", 128, 2048, Matrix::kF32Out},
                           {"q3moe lm_head 151936x2048 +norm", 151936, 2048, Matrix::kNorm}};
    fmt::print("\n{:<32} {:>5} {:>9} {:>9} {:>9} {:>10} {:>10} {:>9}\n", "matrix (model's op)",
               "batch", "warp_us", "ring_us", "floor_us", "warp/floor", "ring/floor", "GB/s ring");
    // PEREGRINE_BENCH_GEMV_FP8_ONLY=1: the fp8 table alone (bf16 matrices and the stack skipped).
    const bool fp8_only = EnvFlag("PEREGRINE_BENCH_GEMV_FP8_ONLY", false);
    // PEREGRINE_BENCH_GEMV_MATCH=<text>: only the matrices whose name contains it.
    const char* match_env = std::getenv("PEREGRINE_BENCH_GEMV_MATCH");
    const std::string match = match_env != nullptr ? match_env : "";
    for (const Matrix& mt : mats) {
      if (fp8_only) break;
      if (!match.empty() && std::string(mt.name).find(match) == std::string::npos) continue;
      Projection pr(mt, 4, Dev(norm_w.p, {mt.k}), 10);
      for (int64_t n : {1, 4}) {
        const auto [warp_ms, ring_ms] = WarpAndRing([&] { return pr.TimeMs(n); });
        const double bytes = pr.FloorBytes(n);
        const double floor_ms = bytes / bw * 1e3;
        fmt::print("{:<32} {:>5} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.1f}% {:>9.1f}% {:>9.0f}\n", mt.name, n,
                   warp_ms * 1e3, ring_ms * 1e3, floor_ms * 1e3, 100 * floor_ms / warp_ms,
                   100 * floor_ms / ring_ms, bytes / (ring_ms * 1e-3) / 1e9);
      }
    }

    // PEREGRINE_BENCH_GEMV_SINGLE_ONLY=1: the bf16 single-matrix table alone.
    if (EnvFlag("PEREGRINE_BENCH_GEMV_SINGLE_ONLY", false)) return 0;

    // ---- fp8 e4m3 weights: LaunchFp8Gemv's f32-FMA kernel vs its tensor-core variants ------
    // Llama-3.1-8B's projections with one per-tensor scale (cuda_fp8_gemv), DeepSeek-V3's
    // dense fp8 projections with 128x128 block scales (cuda_fp8_block), through ops::Matmul,
    // the kernel chosen by cuda::SetFp8GemvVariant (at 8 rows with the f32 variant Llama's
    // per-tensor Matmul takes cuBLASLt, as before the tensor-core GEMV). Floor: weight + scale
    // + x + out bytes.
    {
      struct Fp8Matrix {
        const char* name;
        int64_t m, k;
        bool acc, block;
      };
      const Fp8Matrix fp8[] = {{"fp8 qkv 6144x4096", kQkv, kHidden, false, false},
                               {"fp8 o 4096x4096 +=", kHidden, kHidden, true, false},
                               {"fp8 gate_up 28672x4096", 2 * kInter, kHidden, false, false},
                               {"fp8 down 4096x14336 +=", kHidden, kInter, true, false},
                               {"v3 q_a+kv_a 2112x7168 blk", 2112, 7168, false, true},
                               {"v3 q_b 24576x1536 blk", 24576, 1536, false, true},
                               {"v3 o 7168x16384 += blk", 7168, 16384, true, true},
                               {"v3 gate 18432x7168 blk", 18432, 7168, false, true},
                               {"v3 down 7168x18432 += blk", 7168, 18432, true, true},
                               {"v3 sh.down 7168x2048 += blk", 7168, 2048, true, true}};
      struct Named {
        const char* name;
        pg::cuda::Fp8GemvVariant v;
      };
      // {mma, depth, chunk, interleave, warps_per_sm, prefetch, split, ring, ring_piece_kb,
      // ring_depth, ring_stage_x, ring_warps, ring_blocks}: f32 kernel, the per-warp cp.async
      // tensor-core kernel (d4c1i, the default before the ring), the ring tensor-core kernel
      // (gemm/fp8_ring_mma.cu) in its plan's layout ("ring"), with 2 KB pieces in 4 slots and x
      // from global ("r2d4"), x always staged ("ringx"), half-SM blocks ("ring2b": room for the
      // next kernel's), two of them an SM ("ring2b2"), 16 consumer warps ("ring16").
      const Named variants[] = {
          {"f32", {false, 6, 1, false, 24, 0, 0, 0, 0, 0, 0}},   {"d4c1i", {true, 4, 1, true, 24, 0, 0, 0, 0, 0, 0}},
          {"ring", {true, 4, 1, true, 24, 0, 0, 1, 0, 0, 2}},    {"r2d4", {true, 4, 1, true, 24, 0, 0, 1, 2, 4, 0}},
          {"ringx", {true, 4, 1, true, 24, 0, 0, 1, 0, 0, 1}},   {"ring2b", {true, 4, 1, true, 24, 0, 0, 1, 0, 0, 2, 8, 2}},
          {"ring16", {true, 4, 1, true, 24, 0, 0, 1, 0, 0, 2, 16, 1}}, {"ring2b2", {true, 4, 1, true, 24, 0, 0, 1, 0, 0, 2, 8, 3}}};
      const pg::cuda::Fp8GemvVariant saved = pg::cuda::GetFp8GemvVariant();
      fmt::print("\nfp8 GEMV, us per call (f32 = the f32-FMA kernel; d4c1i = per-warp cp.async tensor "
                 "cores, 4 steps of 1 KB a warp, interleaved; ring = ring tensor cores in the plan's layout, "
                 "r2d4 = 2 KB pieces / 4 slots, x = x staged, 2b = 2 blocks an SM, 16 = 16 warps); floor/t of f32 and of the best\n");
      fmt::print("{:<30} {:>5}", "matrix", "batch");
      for (const Named& v : variants) fmt::print(" {:>9}", v.name);
      fmt::print(" {:>9} {:>8} {:>8} {:>8}\n", "floor_us", "f32/fl", "best/fl", "best");
      for (const Fp8Matrix& mt : fp8) {
        const size_t wbytes = size_t(mt.m * mt.k);
        const int copies = int(std::max<size_t>(1, (size_t(256) << 20) / wbytes + 1));
        std::vector<std::unique_ptr<DeviceBuf>> ws;
        for (int c = 0; c < copies; ++c) {  // bytes of bf16 noise: any e4m3 pattern
          ws.push_back(std::make_unique<DeviceBuf>(wbytes));
          bench::FillBf16(ws.back()->p, mt.m * mt.k / 2, 20 + c, 0.02f);
        }
        const int64_t sm = mt.block ? (mt.m + 127) / 128 : 1, sk = mt.block ? (mt.k + 127) / 128 : 1;
        DeviceBuf scale(size_t(sm * sk * 4));
        const std::vector<float> ones(size_t(sm * sk), 1.0f);
        PG_CUDA_CHECK(cudaMemcpy(scale.p, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice));
        const TensorView sv = mt.block
                                  ? TensorView::Contiguous(scale.p, DType::kF32, {sm, sk}, Device::kCuda)
                                  : TensorView::Contiguous(scale.p, DType::kF32, {1}, Device::kCuda);
        for (int64_t n : {1, 4, 8}) {  // Llama at 8 rows: f32 = the old path, cuBLASLt
          DeviceBuf x(size_t(n * mt.k * 2)), out(size_t(n * mt.m * 2));
          bench::FillBf16(x.p, n * mt.k, 7, 1.0f);
          bench::FillBf16(out.p, n * mt.m, 8, 1.0f);
          const double bytes = double(wbytes) + double(sm * sk * 4) + double(n * mt.k * 2) +
                               double(n * mt.m * 2) * (mt.acc ? 2 : 1);
          const double floor_ms = bytes / bw * 1e3;
          fmt::print("{:<30} {:>5}", mt.name, n);
          double f32_ms = 0, best_ms = 1e30;
          const char* best = "";
          for (const Named& v : variants) {
            pg::cuda::SetFp8GemvVariant(v.v);
            const double ms = GraphMedianMs([&](int i) {
              ops::Matmul({.x = Dev(x.p, {n, mt.k}),
                           .w = TensorView::Contiguous(ws[size_t(i % copies)]->p, DType::kF8E4M3,
                                                       {mt.m, mt.k}, Device::kCuda),
                           .out = Dev(out.p, {n, mt.m}), .w_scale = sv, .accumulate = mt.acc});
            });
            if (!v.v.mma) f32_ms = ms;
            else if (ms < best_ms) best_ms = ms, best = v.name;
            fmt::print(" {:>9.2f}", ms * 1e3);
          }
          fmt::print(" {:>9.2f} {:>7.1f}% {:>7.1f}% {:>8}\n", floor_ms * 1e3, 100 * floor_ms / f32_ms,
                     100 * floor_ms / best_ms, best);
        }
      }
      pg::cuda::SetFp8GemvVariant(saved);
    }
    RunFp8FusedBench(bw, norm_w.p);
    RunBf16RowsBench(bw, nw, Dev(norm_w.p, {2048}));

    if (fp8_only) return 0;
    // ---- the 32-layer projection stack -------------------------------------------------------
    struct Layer { std::unique_ptr<DeviceBuf> qkv, o, gate_up, down; };
    std::vector<Layer> layers(kLayers);
    double stack_bytes = 0;
    for (int l = 0; l < kLayers; ++l) {
      auto make = [&](int64_t m, int64_t k, uint32_t seed) {
        auto b = std::make_unique<DeviceBuf>(size_t(m * k * 2));
        bench::FillBf16(b->p, m * k, seed, 0.02f);
        stack_bytes += double(m * k * 2);
        return b;
      };
      layers[size_t(l)] = {make(kQkv, kHidden, 100 + l), make(kHidden, kHidden, 200 + l),
                           make(2 * kInter, kHidden, 300 + l), make(kHidden, kInter, 400 + l)};
    }
    fmt::print("\n32-layer projection stack ({:.2f} GB of weights): floor {:.1f} us\n",
               stack_bytes / 1e9, stack_bytes / bw * 1e6);
    fmt::print("{:<10} {:>5} {:>10} {:>9} {:>10} {:>9}\n", "stack", "batch", "warp_us", "floor/t",
               "ring_us", "floor/t");
    for (int64_t n : {1, 4}) {
      DeviceBuf x(size_t(n * kHidden * 2)), hn(size_t(n * kHidden * 2)), qkv(size_t(n * kQkv * 2)),
          o(size_t(n * kHidden * 2)), gu(size_t(n * 2 * kInter * 2)), act(size_t(n * kInter * 2)),
          down(size_t(n * kHidden * 2));
      bench::FillBf16(x.p, n * kHidden, 9, 1.0f);
      bench::FillBf16(o.p, n * kHidden, 11, 0.01f);
      const TensorView X = Dev(x.p, {n, kHidden}), HN = Dev(hn.p, {n, kHidden}),
                       QKV = Dev(qkv.p, {n, kQkv}), O = Dev(o.p, {n, kHidden}),
                       GU = Dev(gu.p, {n, 2 * kInter}), ACT = Dev(act.p, {n, kInter}),
                       DOWN = Dev(down.p, {n, kHidden});
      auto unfused = [&](int) {
        for (const Layer& L : layers) {
          ops::RmsNorm({.x = DOWN, .weight = nw, .out = HN, .residual = X});
          ops::Matmul({.x = HN, .w = Dev(L.qkv->p, {kQkv, kHidden}), .out = QKV});
          // (attention would read qkv and write o; o keeps its fill)
          ops::Matmul({.x = O, .w = Dev(L.o->p, {kHidden, kHidden}), .out = DOWN});
          ops::RmsNorm({.x = DOWN, .weight = nw, .out = HN, .residual = X});
          ops::Matmul({.x = HN, .w = Dev(L.gate_up->p, {2 * kInter, kHidden}), .out = GU});
          ops::SwiGlu({.gate = GU, .out = ACT});
          ops::Matmul({.x = ACT, .w = Dev(L.down->p, {kHidden, kInter}), .out = DOWN});
        }
      };
      auto fused = [&](int) {
        for (const Layer& L : layers) {
          ops::FusedMatmul({.x = X, .norm_weight = nw, .w = Dev(L.qkv->p, {kQkv, kHidden}),
                            .out = QKV, .normed = HN});
          ops::Matmul({.x = O, .w = Dev(L.o->p, {kHidden, kHidden}), .out = X, .accumulate = true});
          ops::FusedMatmul({.x = X, .norm_weight = nw, .w = Dev(L.gate_up->p, {2 * kInter, kHidden}),
                            .swiglu = true, .out = ACT, .normed = HN, .projected = GU});
          ops::Matmul({.x = ACT, .w = Dev(L.down->p, {kHidden, kInter}), .out = X, .accumulate = true});
        }
      };
      const double floor_ms = stack_bytes / bw * 1e3;
      const auto [un_warp, un_ring] = WarpAndRing([&] {
        bench::FillBf16(down.p, n * kHidden, 12, 0.01f);
        return GraphMedianMs(unfused, 2);
      });
      const auto [fu_warp, fu_ring] = WarpAndRing([&] {
        bench::FillBf16(x.p, n * kHidden, 9, 1.0f);
        return GraphMedianMs(fused, 2);
      });
      fmt::print("{:<10} {:>5} {:>10.1f} {:>8.1f}% {:>10.1f} {:>8.1f}%\n", "unfused", n, un_warp * 1e3,
                 100 * floor_ms / un_warp, un_ring * 1e3, 100 * floor_ms / un_ring);
      fmt::print("{:<10} {:>5} {:>10.1f} {:>8.1f}% {:>10.1f} {:>8.1f}%\n", "fused", n, fu_warp * 1e3,
                 100 * floor_ms / fu_warp, fu_ring * 1e3, 100 * floor_ms / fu_ring);
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_gemv: {}\n", e.what());
    return 1;
  }
}

}  // namespace pg::bench

#ifndef PG_GEMV_BENCH_NO_MAIN
int main() { return pg::bench::RunGemvBench(); }
#endif
