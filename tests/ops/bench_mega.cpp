// The persistent batch-1 decode kernel (ops_mega.h) against the HBM floor, one H200 run:
// the 32-layer Llama-3.1-8B projection stack of one decode step (norm + qkv, o +=, norm +
// gate_up + SwiGLU, down +=; no attention: o reads the first 4096 qkv outputs), as
//   fused : the current device path's ops (FusedMatmul, Matmul accumulate), PDL-chained;
//   mega1 : ONE MegaPlan launch of all 128 steps;
//   megaL : the model's split: step 0, then one launch per layer [o, gate_up, down, next qkv]
//           (attention would run between launches);
// floor = the stack's weight bytes / the HBM rate measured in the same run (D2D copy).
// Per-step time from CUDA-graph replay. PEREGRINE_PDL=0 turns PDL off (run both ways).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <memory>
#include <vector>

#include "bench_timing.h"
#include "kernels/cuda/ceilings.h"
#include "kernels/cuda/common/context.h"
#include "kernels/ops_mega.h"

namespace pg::bench {
void FillBf16(void* p, int64_t n, uint32_t seed, float scale);

int RunMegaBench() {
  try {
    constexpr int64_t kH = 4096, kQkv = 6144, kF = 14336;
    constexpr int kLayers = 32;
    cudaDeviceProp prop{};
    PG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const double bw = cuda::MeasureHbmBytesPerS();
    fmt::print("device: {} ({} SMs); HBM d2d copy {:.1f} GB/s; PDL {}\n", prop.name,
               prop.multiProcessorCount, bw / 1e9, cuda::PdlEnabled() ? "on" : "off");
    auto dev = [](void* p, std::initializer_list<int64_t> shape) {
      return TensorView::Contiguous(p, DType::kBF16, shape, Device::kCuda);
    };
    DeviceBuf nw(size_t(kH) * 2), x(size_t(kH) * 2), qkv(size_t(kQkv) * 2), act(size_t(kF) * 2),
        hn(size_t(kH) * 2), gu(size_t(2 * kF) * 2);
    FillBf16(nw.p, kH, 3, 1.0f);
    FillBf16(x.p, kH, 9, 1.0f);
    std::vector<std::unique_ptr<DeviceBuf>> w;
    std::vector<ops::MegaStepParams> steps;
    double bytes = 0;
    const TensorView X = dev(x.p, {1, kH}), NW = dev(nw.p, {kH});
    for (int l = 0; l < kLayers; ++l) {
      auto make = [&](int64_t m, int64_t k) {
        w.push_back(std::make_unique<DeviceBuf>(size_t(m * k * 2)));
        FillBf16(w.back()->p, m * k, uint32_t(100 + w.size()), 0.02f);
        bytes += double(m * k * 2);
        return dev(w.back()->p, {m, k});
      };
      steps.push_back({.kind = ops::MegaStepKind::kNormProject, .x = X, .norm_weight = NW,
                       .w = make(kQkv, kH), .out = dev(qkv.p, {1, kQkv})});
      steps.push_back({.kind = ops::MegaStepKind::kAccumulate, .x = dev(qkv.p, {1, kH}),
                       .w = make(kH, kH), .out = X});
      steps.push_back({.kind = ops::MegaStepKind::kNormSwiGlu, .x = X, .norm_weight = NW,
                       .w = make(2 * kF, kH), .out = dev(act.p, {1, kF}),
                       .projected = dev(gu.p, {1, 2 * kF})});
      steps.push_back({.kind = ops::MegaStepKind::kAccumulate, .x = dev(act.p, {1, kF}),
                       .w = make(kH, kF), .out = X});
    }
    std::string why;
    auto plan = ops::MakeMegaPlan(steps, &why);
    if (!plan) {
      fmt::print(stderr, "bench_mega: plan refused: {}\n", why);
      return 1;
    }
    const double floor_us = bytes / bw * 1e6;
    fmt::print("32-layer projection stack, batch 1: {:.2f} GB of weights, floor {:.1f} us\n",
               bytes / 1e9, floor_us);
    const int n = plan->num_steps();
    auto fused = [&](int) {
      ops::RunMegaStepsComposed(steps, dev(hn.p, {1, kH}), dev(gu.p, {1, 2 * kF}));
    };
    auto mega1 = [&](int) { plan->Run(0, n); };
    auto mega_layers = [&](int) {
      plan->Run(0, 1);
      for (int b = 1; b < n; b += 4) plan->Run(b, std::min(b + 4, n));
    };
    fmt::print("{:<8} {:>10} {:>9}\n", "path", "us/step", "floor/t");
    for (auto [name, fn] : {std::pair<const char*, std::function<void(int)>>{"fused", fused},
                            {"mega1", mega1},
                            {"megaL", mega_layers}}) {
      FillBf16(x.p, kH, 9, 1.0f);
      const double ms = GraphMedianMs(fn, 2);
      fmt::print("{:<8} {:>10.1f} {:>8.1f}%\n", name, ms * 1e3, 100 * floor_us / (ms * 1e3));
    }
    // One traced run of each launch shape (PEREGRINE_MEGA_TRACE=1 at plan creation).
    plan->Run(0, n);
    const std::string report = plan->TraceReport();
    if (!report.empty()) fmt::print("{}", report);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_mega: {}\n", e.what());
    return 1;
  }
}

}  // namespace pg::bench
