// MoE layer benchmark on one GPU (issue 7 evidence; not a test). Per shape and token count:
//   layer   = router Matmul (bf16 logits) + MoeRouter + shared expert (if any; Matmul/SwiGlu,
//             fp8 block-scaled for the DeepSeek-V3 shape) + MoeExperts accumulating onto it,
//   experts = MoeExperts alone,
// each captured once into a CUDA graph and replayed (median of replays), against
//   floor = max(bytes touched / HBM bandwidth, FLOPs / bf16 GEMM rate), both measured in the
//   same run (kernels/cuda/ceilings.h). Bytes touched: the distinct routed experts the
//   router chose (their gate/up/down + scales), the shared expert, the router weight.
// Variants: the auto path, the route-walking path, the expert-sorted path with 16/32/64/128-
// row tiles (tile gain at 32-64 tokens against forcing 128-row tiles). A cross-check compares
// the walking and sorted paths' outputs on every shape (different algorithms, same function).
// Output: a table on stdout and JSON lines (--json FILE) for docs/PERF.md. --decode-only: the
// decode section alone; --layer-only: everything but the decode section; --shapes a,b and
// --max-tokens N restrict the layer table.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/cuda/ceilings.h"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/moe/moe_tuning.h"
#include "kernels/ops.h"
#include "kernels/ops_moe.h"
#include "kernels/registry.h"

namespace pg::bench {
void FillBf16(void* p, int64_t n, uint32_t seed, float scale);  // bench_fill.cu
void FillFp8(void* p, int64_t n, uint32_t seed);                 // bench_moe_fill.cu
void FillF32(void* p, int64_t n, float v);
}  // namespace pg::bench

namespace {

using namespace pg;

struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buf(size_t b) : bytes(b) { PG_CUDA_CHECK(cudaMalloc(&p, b)); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

TensorView Dev(void* p, DType dt, std::initializer_list<int64_t> shape) {
  return TensorView::Contiguous(p, dt, shape, Device::kCuda);
}

struct Shape {
  const char* name;
  int64_t hidden, experts, top_k, inter, shared_inter;  // shared_inter 0: none
  bool fp8;                                             // fp8 e4m3, 128x128 block scales
  ops::MoeScoring scoring;
  int groups, topk_groups;
  bool renormalize;
  float scaling;
};

int64_t Blocks(int64_t a) { return (a + 127) / 128; }

// One layer's weights on the device.
struct Layer {
  Shape s;
  std::vector<std::unique_ptr<Buf>> bufs;
  std::vector<ops::MoeExpertWeights> experts;
  TensorView router_w, sh_gate, sh_up, sh_down, sh_gate_s, sh_up_s, sh_down_s;
  int64_t expert_bytes = 0, shared_bytes = 0, router_bytes = 0;

  void* Alloc(size_t bytes) {
    bufs.push_back(std::make_unique<Buf>(bytes));
    return bufs.back()->p;
  }
  // A [rows, cols] weight (+ its block scales when fp8) filled with random values.
  TensorView Weight(int64_t rows, int64_t cols, TensorView* scale, uint32_t seed) {
    const DType dt = s.fp8 ? DType::kF8E4M3 : DType::kBF16;
    void* p = Alloc(size_t(rows * cols * (s.fp8 ? 1 : 2)));
    if (s.fp8) {
      bench::FillFp8(p, rows * cols, seed);
      void* sp = Alloc(size_t(Blocks(rows) * Blocks(cols) * 4));
      bench::FillF32(sp, Blocks(rows) * Blocks(cols), 0.02f);
      *scale = Dev(sp, DType::kF32, {Blocks(rows), Blocks(cols)});
    } else {
      bench::FillBf16(p, rows * cols, seed, 0.05f);
    }
    return Dev(p, dt, {rows, cols});
  }
  explicit Layer(const Shape& shape) : s(shape) {
    const int64_t h = s.hidden, f = s.inter;
    for (int64_t e = 0; e < s.experts; ++e) {
      ops::MoeExpertWeights w;
      w.gate = Weight(f, h, &w.gate_scale, uint32_t(3 * e + 1));
      w.up = Weight(f, h, &w.up_scale, uint32_t(3 * e + 2));
      w.down = Weight(h, f, &w.down_scale, uint32_t(3 * e + 3));
      experts.push_back(w);
    }
    const int64_t elem = s.fp8 ? 1 : 2;
    const int64_t scale_bytes = s.fp8 ? 4 * (2 * Blocks(f) * Blocks(h) + Blocks(h) * Blocks(f)) : 0;
    expert_bytes = 3 * h * f * elem + scale_bytes;
    router_w = Dev(Alloc(size_t(s.experts * h * 2)), DType::kBF16, {s.experts, h});
    bench::FillBf16(router_w.data, s.experts * h, 99, 0.05f);
    router_bytes = s.experts * h * 2;
    if (s.shared_inter) {
      const int64_t si = s.shared_inter;
      sh_gate = Weight(si, h, &sh_gate_s, 7001);
      sh_up = Weight(si, h, &sh_up_s, 7002);
      sh_down = Weight(h, si, &sh_down_s, 7003);
      shared_bytes = 3 * h * si * elem + (s.fp8 ? 4 * 3 * Blocks(si) * Blocks(h) : 0);
    }
    PG_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

// Per-token-count activations.
struct Acts {
  std::vector<std::unique_ptr<Buf>> bufs;
  TensorView x, logits, logits32, ids, w, out, g, u, a, res, normed, norm_w;
  void* Alloc(size_t bytes) {
    bufs.push_back(std::make_unique<Buf>(bytes));
    return bufs.back()->p;
  }
  Acts(const Shape& s, int64_t n) {
    x = Dev(Alloc(size_t(n * s.hidden * 2)), DType::kBF16, {n, s.hidden});
    bench::FillBf16(x.data, n * s.hidden, 1234, 1.0f);
    logits = Dev(Alloc(size_t(n * s.experts * 2)), DType::kBF16, {n, s.experts});
    logits32 = Dev(Alloc(size_t(n * s.experts * 4)), DType::kF32, {n, s.experts});
    res = Dev(Alloc(size_t(n * s.hidden * 2)), DType::kBF16, {n, s.hidden});
    bench::FillBf16(res.data, n * s.hidden, 4321, 1.0f);
    normed = Dev(Alloc(size_t(n * s.hidden * 2)), DType::kBF16, {n, s.hidden});
    norm_w = Dev(Alloc(size_t(s.hidden * 4)), DType::kF32, {s.hidden});
    bench::FillF32(norm_w.data, s.hidden, 1.0f);
    ids = Dev(Alloc(size_t(n * s.top_k * 4)), DType::kI32, {n, s.top_k});
    w = Dev(Alloc(size_t(n * s.top_k * 4)), DType::kF32, {n, s.top_k});
    out = Dev(Alloc(size_t(n * s.hidden * 2)), DType::kBF16, {n, s.hidden});
    const int64_t si = std::max<int64_t>(1, s.shared_inter);
    g = Dev(Alloc(size_t(n * si * 2)), DType::kBF16, {n, si});
    u = Dev(Alloc(size_t(n * si * 2)), DType::kBF16, {n, si});
    a = Dev(Alloc(size_t(n * si * 2)), DType::kBF16, {n, si});
    PG_CUDA_CHECK(cudaDeviceSynchronize());  // fills ran on the legacy stream
  }
};

void Router(const Layer& L, const Acts& A) {
  ops::Matmul({.x = A.x, .w = L.router_w, .out = A.logits});
  ops::MoeRouter({.logits = A.logits, .topk_ids = A.ids, .topk_weights = A.w,
                  .scoring = L.s.scoring, .num_groups = L.s.groups,
                  .topk_groups = L.s.topk_groups, .renormalize = L.s.renormalize,
                  .scaling = L.s.scaling});
}

void Experts(const Layer& L, const Acts& A, bool accumulate) {
  ops::MoeExperts({.x = A.x, .topk_ids = A.ids, .topk_weights = A.w, .experts = L.experts,
                   .out = A.out, .accumulate = accumulate});
}

void FullLayer(const Layer& L, const Acts& A) {
  Router(L, A);
  if (L.s.shared_inter) {
    ops::Matmul({.x = A.x, .w = L.sh_gate, .out = A.g, .w_scale = L.sh_gate_s});
    ops::Matmul({.x = A.x, .w = L.sh_up, .out = A.u, .w_scale = L.sh_up_s});
    ops::SwiGlu({.gate = A.g, .up = A.u, .out = A.a});
    ops::Matmul({.x = A.a, .w = L.sh_down, .out = A.out, .w_scale = L.sh_down_s});
  }
  Experts(L, A, L.s.shared_inter > 0);
}

// The decode form of the layer (models/moe_device.cpp, batches <= 4): the router matmul fused
// into MoeRouter (one kernel, f32 logits), the shared expert inside MoeExperts.
void FusedLayer(const Layer& L, const Acts& A) {
  ops::MoeRouter({.logits = A.logits32, .topk_ids = A.ids, .topk_weights = A.w,
                  .scoring = L.s.scoring, .num_groups = L.s.groups,
                  .topk_groups = L.s.topk_groups, .renormalize = L.s.renormalize,
                  .scaling = L.s.scaling, .x = A.x, .router = L.router_w});
  ops::MoeExpertsParams p{.x = A.x, .topk_ids = A.ids, .topk_weights = A.w, .experts = L.experts,
                          .out = A.out};
  if (L.s.shared_inter)
    p.shared = {L.sh_gate, L.sh_up, L.sh_down, L.sh_gate_s, L.sh_up_s, L.sh_down_s};
  ops::MoeExperts(p);
}

// The FFN block of the Qwen3-MoE decode step (models/moe_device.cpp RunDeviceMoeFfn at one
// token), RMSNorm x -> normed, then the routed (+ shared) experts on normed:
//   mode 0: RmsNorm, router Matmul (f32 logits), MoeRouter, MoeExperts (5 kernels);
//   mode 1: MoeExperts with the routing inside (MoeExpertsParams::route) and the RMSNorm and
//           router matmul in the route: router kernel (logits + normed) + 2 walking kernels;
//   mode 2: RmsNorm, router Matmul, MoeExperts routing inside (4 kernels);
//   mode 3: MoeRouter with the RMSNorm and router matmul fused (CUDA: one kernel, arrival
//           counter), MoeExperts (3 kernels).
// Mode 0 is the models' default decode path (moe_device.cpp: measured fastest).
void NormFfn(const Layer& L, const Acts& A, int mode) {
  ops::MoeRouterParams rp{.logits = A.logits32, .topk_ids = A.ids, .topk_weights = A.w,
                          .scoring = L.s.scoring, .num_groups = L.s.groups,
                          .topk_groups = L.s.topk_groups, .renormalize = L.s.renormalize,
                          .scaling = L.s.scaling};
  if (mode == 3) {
    rp.x = A.x, rp.router = L.router_w, rp.norm_weight = A.norm_w, rp.normed = A.normed;
    ops::MoeRouter(rp);
  } else if (mode == 1) {
    rp.x = A.x, rp.router = L.router_w, rp.norm_weight = A.norm_w, rp.normed = A.normed;
  } else {
    ops::RmsNorm({.x = A.x, .weight = A.norm_w, .out = A.normed, .eps = 1e-6f});
    ops::Matmul({.x = A.normed, .w = L.router_w, .out = A.logits32});
    if (mode == 0) ops::MoeRouter(rp);
  }
  ops::MoeExpertsParams p{.x = A.normed, .topk_ids = A.ids, .topk_weights = A.w,
                          .experts = L.experts, .out = A.out, .accumulate = true};
  if (L.s.shared_inter)
    p.shared = {L.sh_gate, L.sh_up, L.sh_down, L.sh_gate_s, L.sh_up_s, L.sh_down_s};
  if (mode == 1 || mode == 2) p.route = &rp;
  ops::MoeExperts(p);
}

// Median microseconds per replay of fn captured as one CUDA graph (after a warm-up run
// outside capture that sizes the scratch and builds the expert table).
// per_graph > 1: fn is captured that many times in one graph and the time is per call (the
// graph launch amortised, consecutive calls overlapping through PDL as in a decode step).
double GraphUs(cudaStream_t stream, const std::function<void()>& fn, int reps = 30,
               int per_graph = 1) {
  cuda::StreamScope scope(stream);
  fn();
  PG_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  PG_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < per_graph; ++i) fn();
  PG_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  PG_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t e0, e1;
  PG_CUDA_CHECK(cudaEventCreate(&e0));
  PG_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<double> t;
  for (int i = 0; i < reps + 3; ++i) {
    PG_CUDA_CHECK(cudaEventRecord(e0, stream));
    PG_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    PG_CUDA_CHECK(cudaEventRecord(e1, stream));
    PG_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    PG_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 3) t.push_back(ms * 1e3);
  }
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2] / per_graph;
}

std::vector<float> ToHost(const TensorView& t) {
  std::vector<uint16_t> raw(size_t(t.numel()));
  PG_CUDA_CHECK(cudaMemcpy(raw.data(), t.data, raw.size() * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    const uint32_t b = uint32_t(raw[i]) << 16;
    std::memcpy(&f[i], &b, 4);
  }
  return f;
}

// The fp8 128x128 block-scaled dense Matmul (cuda_fp8_block) on DeepSeek-V3's dense
// projections: q_a 1536x7168, q_b 24576x1536, kv_a 576x7168, o 7168x16384, shared-expert
// gate 2048x7168 and down 7168x2048; graph replays vs max(weight bytes / HBM, FLOPs / GEMM).
void DenseFp8(cudaStream_t stream, double bw, double gemm, std::FILE* json) {
  struct M {
    const char* name;
    int64_t m, k;
  };
  const M mats[] = {{"q_a", 1536, 7168}, {"q_b", 24576, 1536}, {"kv_a", 576, 7168},
                    {"o", 7168, 16384},  {"sh_gate", 2048, 7168}, {"sh_down", 7168, 2048}};
  fmt::print("\n== fp8 block-scaled dense Matmul (cuda_fp8_block)\n{:>8} {:>6} {:>10} {:>10} {:>8}\n",
             "matrix", "tokens", "us", "floor_us", "floor/t");
  for (const M& mt : mats) {
    Buf w(size_t(mt.m * mt.k)), sc(size_t(Blocks(mt.m) * Blocks(mt.k) * 4));
    bench::FillFp8(w.p, mt.m * mt.k, 5);
    bench::FillF32(sc.p, Blocks(mt.m) * Blocks(mt.k), 0.02f);
    const TensorView wv = Dev(w.p, DType::kF8E4M3, {mt.m, mt.k});
    const TensorView sv = Dev(sc.p, DType::kF32, {Blocks(mt.m), Blocks(mt.k)});
    for (int64_t n : {1, 8, 32, 128, 512, 2048}) {
      Buf x(size_t(n * mt.k * 2)), o(size_t(n * mt.m * 2));
      bench::FillBf16(x.p, n * mt.k, 3, 1.0f);
      PG_CUDA_CHECK(cudaDeviceSynchronize());
      const TensorView xv = Dev(x.p, DType::kBF16, {n, mt.k}), ov = Dev(o.p, DType::kBF16, {n, mt.m});
      const double us = GraphUs(stream, [&] { ops::Matmul({.x = xv, .w = wv, .out = ov, .w_scale = sv}); });
      const double bytes = double(mt.m * mt.k) + 4.0 * double(Blocks(mt.m) * Blocks(mt.k)) +
                           2.0 * double(n * (mt.k + mt.m));
      const double floor = std::max(bytes / bw, 2.0 * double(n * mt.m * mt.k) / gemm) * 1e6;
      fmt::print("{:>8} {:>6} {:>10.1f} {:>10.1f} {:>7.0f}%\n", mt.name, n, us, floor, 100 * floor / us);
      if (json)
        fmt::print(json, "{{\"dense\": \"{}\", \"m\": {}, \"k\": {}, \"tokens\": {}, \"us\": {:.2f}, \"floor_us\": {:.2f}}}\n",
                   mt.name, mt.m, mt.k, n, us, floor);
    }
  }
}

struct Variant {
  const char* name;
  cuda::MoePath path;
  int tile_rows;
};

double Nmse(const std::vector<float>& ref, const std::vector<float>& got) {
  double se = 0, ss = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(got[i]) - ref[i];
    se += d * d, ss += double(ref[i]) * ref[i];
  }
  return ss > 0 ? se / ss : (se > 0 ? 1.0 : 0.0);
}

// Decode batches (1-4 tokens): the unfused layer (router Matmul + MoeRouter + shared MLP +
// MoeExperts) against the fused decode layer, and the walking kernels' tuning (loads in flight
// in the gate/up and down kernels, warps per block; each kernel alone), 20 calls per graph
// (the graph launch amortised) vs the floor.
void DecodeSection(const Shape& s, cudaStream_t stream, double bw, double gemm, std::FILE* json) {
  Layer L(s);
  fmt::print("\n== decode {}: hidden {} experts {} top-{} inter {} shared {} {} (PDL {})\n", s.name,
             s.hidden, s.experts, s.top_k, s.inter, s.shared_inter, s.fp8 ? "fp8 block" : "bf16",
             cuda::PdlEnabled() ? "on" : "off");
  fmt::print("{:>6} {:>22} {:>10} {:>10} {:>9}\n", "tokens", "variant", "us", "floor_us", "floor/t");
  struct Tune {
    const char* name;
    int gu, down, warps, phases;
    int rows = cuda::MoeTuning{}.walk_down_rows, down_warps = cuda::MoeTuning{}.walk_down_warps;
    bool preload = false;
  };
  const cuda::MoeTuning def;
  // rows: the down kernel's form (1: one warp per hidden row; 2/4/8: tiles of that many rows).
  const Tune tunes[] = {{"default", def.walk_gu_unroll, def.walk_down_unroll, def.walk_warps, 3},
                        {"preload", def.walk_gu_unroll, def.walk_down_unroll, def.walk_warps, 3,
                         def.walk_down_rows, def.walk_down_warps, true},
                        {"rows1 (warp/row)", 2, 0, 4, 3, 1},
                        {"rows1 gu2 dn8 w8", 2, 8, 8, 3, 1},
                        {"rows2 dw4", 2, 0, 4, 3, 2, 4},  {"rows8 dw4", 2, 0, 4, 3, 8, 4},
                        {"rows4 dw8", 2, 0, 4, 3, 4, 8},  {"rows2 dw8", 2, 0, 4, 3, 2, 8},
                        {"gu4 w4", 4, 0, 4, 3},
                        {"gate/up only", def.walk_gu_unroll, def.walk_down_unroll, def.walk_warps, 1},
                        {"down only", def.walk_gu_unroll, def.walk_down_unroll, def.walk_warps, 2},
                        {"down only rows1", 2, 0, 4, 2, 1},
                        {"down only rows2 dw4", 2, 0, 4, 2, 2, 4},
                        {"down only rows8 dw4", 2, 0, 4, 2, 8, 4},
                        {"down only rows4 dw8", 2, 0, 4, 2, 4, 8},
                        {"down only rows2 dw8", 2, 0, 4, 2, 2, 8},
                        {"gate/up only w8", 2, 0, 8, 1}};
  constexpr int kPerGraph = 20;  // calls per graph: times per call without the graph launch
  for (int64_t n : {1, 2, 4}) {
    Acts A(s, n);
    cuda::SetMoeTuning({});
    {
      cuda::StreamScope scope(stream);
      FusedLayer(L, A);
      PG_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    std::vector<int32_t> ids(size_t(n * s.top_k));
    PG_CUDA_CHECK(cudaMemcpy(ids.data(), A.ids.data, ids.size() * 4, cudaMemcpyDeviceToHost));
    const std::set<int32_t> touched(ids.begin(), ids.end());
    const double bytes = double(touched.size()) * double(L.expert_bytes) +
                         double(L.shared_bytes + L.router_bytes);
    const double flops = 2.0 * 3.0 * double(n * s.top_k) * double(s.hidden * s.inter) +
                         2.0 * 3.0 * double(n) * double(s.hidden * s.shared_inter) +
                         2.0 * double(n) * double(s.hidden * s.experts);
    const double floor = std::max(bytes / bw, flops / gemm) * 1e6;
    auto row = [&](const std::string& name, double us) {
      fmt::print("{:>6} {:>22} {:>10.1f} {:>10.1f} {:>8.0f}%\n", n, name, us, floor, 100 * floor / us);
      if (json)
        fmt::print(json,
                   "{{\"decode\": \"{}\", \"tokens\": {}, \"variant\": \"{}\", \"pdl\": {}, "
                   "\"us\": {:.2f}, \"floor_us\": {:.2f}, \"bytes\": {:.0f}}}\n",
                   s.name, n, name, cuda::PdlEnabled() ? 1 : 0, us, floor, bytes);
    };
    // Outputs: unfused (the reference here) vs fused, same routes (f32 vs bf16 logits can
    // differ at near-ties: the check reports the route agreement too).
    cuda::SetMoeTuning({cuda::MoePath::kWalk});
    std::vector<float> ref, got;
    std::vector<int32_t> ids_unfused(ids.size());
    {
      cuda::StreamScope scope(stream);
      FullLayer(L, A);
      PG_CUDA_CHECK(cudaStreamSynchronize(stream));
      ref = ToHost(A.out);
      PG_CUDA_CHECK(cudaMemcpy(ids_unfused.data(), A.ids.data, ids.size() * 4, cudaMemcpyDeviceToHost));
      FusedLayer(L, A);
      PG_CUDA_CHECK(cudaStreamSynchronize(stream));
      got = ToHost(A.out);
    }
    const bool same_routes = std::multiset<int32_t>(ids.begin(), ids.end()) ==
                             std::multiset<int32_t>(ids_unfused.begin(), ids_unfused.end());
    fmt::print("   check n={} fused vs unfused layer: nmse {:.2e} routes {} {}\n", n, Nmse(ref, got),
               same_routes ? "same" : "differ",
               !same_routes || Nmse(ref, got) < 1e-4 ? "OK" : "MISMATCH");
    row("unfused layer", GraphUs(stream, [&] { FullLayer(L, A); }, 10, kPerGraph));
    for (const Tune& t : tunes) {
      cuda::MoeTuning tu;
      tu.path = cuda::MoePath::kWalk;
      tu.walk_gu_unroll = t.gu;
      tu.walk_down_unroll = t.down;
      tu.walk_warps = t.warps;
      tu.walk_phases = t.phases;
      tu.walk_down_rows = t.rows;
      tu.walk_down_warps = t.down_warps;
      tu.walk_down_preload = t.preload;
      cuda::SetMoeTuning(tu);
      if (t.phases == 3 && t.down == 0)
        row(fmt::format("fused {}", t.name), GraphUs(stream, [&] { FusedLayer(L, A); }, 10, kPerGraph));
      row(fmt::format("experts {}", t.name), GraphUs(stream, [&] { Experts(L, A, false); }, 10, kPerGraph));
    }
    cuda::SetMoeTuning({});
    row("router fused", GraphUs(stream, [&] {
          ops::MoeRouter({.logits = A.logits32, .topk_ids = A.ids, .topk_weights = A.w,
                          .scoring = L.s.scoring, .num_groups = L.s.groups,
                          .topk_groups = L.s.topk_groups, .renormalize = L.s.renormalize,
                          .scaling = L.s.scaling, .x = A.x, .router = L.router_w});
        }, 10, kPerGraph));
    row("router unfused", GraphUs(stream, [&] { Router(L, A); }, 10, kPerGraph));
    // The FFN's RMSNorm (+ residual add) in front, as the Qwen3-MoE decode step runs it.
    auto norm_router = [&](bool fused) {
      ops::MoeRouterParams p{.logits = A.logits32, .topk_ids = A.ids, .topk_weights = A.w,
                             .scoring = L.s.scoring, .num_groups = L.s.groups,
                             .topk_groups = L.s.topk_groups, .renormalize = L.s.renormalize,
                             .scaling = L.s.scaling};
      if (fused) {
        p.x = A.x, p.router = L.router_w, p.norm_weight = A.norm_w, p.normed = A.normed;
        p.residual = A.res;
      } else {
        ops::RmsNorm({.x = A.x, .weight = A.norm_w, .out = A.normed, .residual = A.res, .eps = 1e-6f});
        ops::Matmul({.x = A.normed, .w = L.router_w, .out = A.logits32});
      }
      ops::MoeRouter(p);
    };
    // The whole FFN block (norm, routing, experts) in its three forms (NormFfn), same routes
    // (the outputs of the forms are checked against mode 0).
    {
      std::vector<float> ffn_ref;
      for (int mode = 0; mode < 4; ++mode) {
        cuda::StreamScope scope(stream);
        PG_CUDA_CHECK(cudaMemsetAsync(A.out.data, 0, size_t(A.out.nbytes()), stream));
        NormFfn(L, A, mode);
        PG_CUDA_CHECK(cudaStreamSynchronize(stream));
        const std::vector<float> got_ffn = ToHost(A.out);
        if (mode == 0) ffn_ref = got_ffn;
        else
          fmt::print("   check n={} FFN block mode {} vs mode 0: nmse {:.2e} {}\n", n, mode,
                     Nmse(ffn_ref, got_ffn), Nmse(ffn_ref, got_ffn) < 1e-4 ? "OK" : "MISMATCH");
      }
      const char* names[] = {"FFN norm+router+experts", "FFN self-routed (3 kern)",
                             "FFN self-routed, mm apart", "FFN fused router+exp"};
      for (int mode = 0; mode < 4; ++mode)
        row(names[mode], GraphUs(stream, [&] { NormFfn(L, A, mode); }, 10, kPerGraph));
      cuda::MoeTuning nopre;
      nopre.walk_down_preload = false;
      cuda::SetMoeTuning(nopre);
      row("FFN n+r+e, no preload", GraphUs(stream, [&] { NormFfn(L, A, 0); }, 10, kPerGraph));
      cuda::SetMoeTuning({});
    }
    row("norm+router fused", GraphUs(stream, [&] { norm_router(true); }, 10, kPerGraph));

    row("norm+router unfused", GraphUs(stream, [&] { norm_router(false); }, 10, kPerGraph));
  }
}

}  // namespace

namespace pg::bench {
// The benchmark (its own binary, or moe_gpu_check --bench-moe).
int RunMoeBench(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::FILE* json = nullptr;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--json") json = std::fopen(argv[i + 1], "w");
  const double bw = cuda::MeasureHbmBytesPerS();
  const double gemm = cuda::MeasureBf16GemmFlopsPerS();
  fmt::print("HBM {:.0f} GB/s (2 GiB d2d copy, read+write); bf16 GEMM {:.0f} TFLOP/s (cuBLASLt 8192^3)\n",
             bw / 1e9, gemm / 1e12);
  if (json) fmt::print(json, "{{\"hbm_GBps\": {:.1f}, \"gemm_TFLOPs\": {:.1f}}}\n", bw / 1e9, gemm / 1e12);

  const Shape shapes[] = {
      {"qwen3-30b-a3b", 2048, 128, 8, 768, 0, false, ops::MoeScoring::kSoftmax, 1, 1, true, 1.0f},
      {"deepseek-v2-lite", 2048, 64, 6, 1408, 2816, false, ops::MoeScoring::kSoftmax, 1, 1, false, 1.0f},
      {"dsv3-fp8-block", 7168, 256, 8, 2048, 2048, true, ops::MoeScoring::kSigmoid, 8, 4, true, 2.5f},
  };
  const int64_t token_counts[] = {1, 8, 32, 64, 128, 512, 2048};
  const Variant variants[] = {{"auto", cuda::MoePath::kAuto, 0},     {"walk", cuda::MoePath::kWalk, 0},
                              {"sorted16", cuda::MoePath::kSorted, 16}, {"sorted32", cuda::MoePath::kSorted, 32},
                              {"sorted64", cuda::MoePath::kSorted, 64}, {"sorted128", cuda::MoePath::kSorted, 128}};
  cudaStream_t stream;
  PG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  bool decode_only = false, layer_only = false;
  std::string only_shapes;      // --shapes a,b: the layer table of these shapes only
  int64_t max_tokens = 1 << 30;  // --max-tokens N: the layer table up to N tokens
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    decode_only = decode_only || a == "--decode-only";
    layer_only = layer_only || a == "--layer-only";  // skip the decode section
    if (a == "--shapes" && i + 1 < argc) only_shapes = fmt::format(",{},", argv[i + 1]);
    if (a == "--max-tokens" && i + 1 < argc) max_tokens = std::atoll(argv[i + 1]);
  }
  for (const Shape& s : shapes) {
    if (layer_only) break;
    try {
      DecodeSection(s, stream, bw, gemm, json);
    } catch (const std::exception& e) {
      fmt::print("decode {}: FAILED: {}\n", s.name, e.what());
      PG_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
  }
  cuda::SetMoeTuning({});
  if (decode_only) {
    if (json) std::fclose(json);
    cudaStreamDestroy(stream);
    return 0;
  }

  for (const Shape& s : shapes) {
   if (!only_shapes.empty() && only_shapes.find(fmt::format(",{},", s.name)) == std::string::npos)
     continue;
   try {
    Layer L(s);
    if (s.shared_inter) {
      Acts probe(s, 1);
      const auto* k = ops::Registry::Global().Selected(ops::MatmulParams{
          .x = probe.x, .w = L.sh_gate, .out = probe.g, .w_scale = L.sh_gate_s});
      fmt::print("shared expert Matmul backend: {}\n", k ? k->backend : std::string("none"));
    }
    fmt::print("\n== {}: hidden {} experts {} top-{} inter {} shared {} {}; expert {:.1f} MB\n", s.name,
               s.hidden, s.experts, s.top_k, s.inter, s.shared_inter, s.fp8 ? "fp8 block" : "bf16",
               L.expert_bytes / 1e6);
    fmt::print("{:>6} {:>10} {:>8} {:>10} {:>10} {:>9} {:>10} {:>9}\n", "tokens", "variant", "touched",
               "layer_us", "floor_us", "floor/t", "experts_us", "floor/t");
    for (int64_t n : token_counts) {
      if (n > max_tokens) break;
      Acts A(s, n);
      {  // routes of this batch (for the floor), from the real router
        cuda::StreamScope scope(stream);
        Router(L, A);
        PG_CUDA_CHECK(cudaStreamSynchronize(stream));
      }
      std::vector<int32_t> ids(size_t(n * s.top_k));
      PG_CUDA_CHECK(cudaMemcpy(ids.data(), A.ids.data, ids.size() * 4, cudaMemcpyDeviceToHost));
      const std::set<int32_t> touched(ids.begin(), ids.end());
      const double routed_bytes = double(touched.size()) * double(L.expert_bytes);
      const double layer_bytes = routed_bytes + double(L.shared_bytes + L.router_bytes);
      const double routed_flops = 2.0 * 3.0 * double(n * s.top_k) * double(s.hidden * s.inter);
      const double layer_flops = routed_flops + 2.0 * 3.0 * double(n) * double(s.hidden * s.shared_inter) +
                                 2.0 * double(n) * double(s.hidden * s.experts);
      const double floor_layer = std::max(layer_bytes / bw, layer_flops / gemm) * 1e6;
      const double floor_exp = std::max(routed_bytes / bw, routed_flops / gemm) * 1e6;
      for (const Variant& v : variants) {
        if (v.path == cuda::MoePath::kWalk && n > 64) continue;
        if (v.path == cuda::MoePath::kSorted && v.tile_rows < 128 && n > 128 && v.tile_rows < 64) continue;
        if (n > 512 && v.path != cuda::MoePath::kAuto && v.tile_rows != 128) continue;
        cuda::SetMoeTuning({v.path, v.tile_rows, cuda::MoeTuning{}.walk_max_tokens});
        const double t_layer = GraphUs(stream, [&] { FullLayer(L, A); });
        const double t_exp = GraphUs(stream, [&] { Experts(L, A, false); });
        fmt::print("{:>6} {:>10} {:>8} {:>10.1f} {:>10.1f} {:>8.0f}% {:>10.1f} {:>8.0f}%\n", n, v.name,
                   touched.size(), t_layer, floor_layer, 100 * floor_layer / t_layer, t_exp,
                   100 * floor_exp / t_exp);
        if (json)
          fmt::print(json,
                     "{{\"shape\": \"{}\", \"tokens\": {}, \"variant\": \"{}\", \"touched\": {}, "
                     "\"layer_us\": {:.2f}, \"layer_floor_us\": {:.2f}, \"experts_us\": {:.2f}, "
                     "\"experts_floor_us\": {:.2f}, \"layer_bytes\": {:.0f}, \"layer_flops\": {:.0f}}}\n",
                     s.name, n, v.name, touched.size(), t_layer, floor_layer, t_exp, floor_exp,
                     layer_bytes, layer_flops);
      }
      cuda::SetMoeTuning({});
      // Cross-check on the real shape: walking vs sorted (16- and 128-row tiles) outputs.
      if (n == 8 || n == 64) {
        std::vector<std::vector<float>> outs;
        for (const Variant& v : {variants[1], variants[2], variants[5]}) {
          cuda::SetMoeTuning({v.path, v.tile_rows, cuda::MoeTuning{}.walk_max_tokens});
          cuda::StreamScope scope(stream);
          Experts(L, A, false);
          PG_CUDA_CHECK(cudaStreamSynchronize(stream));
          outs.push_back(ToHost(A.out));
        }
        cuda::SetMoeTuning({});
        for (size_t k = 1; k < outs.size(); ++k) {
          double se = 0, ss = 0, mx = 0;
          for (size_t i = 0; i < outs[0].size(); ++i) {
            const double d = double(outs[k][i]) - outs[0][i];
            se += d * d, ss += double(outs[0][i]) * outs[0][i], mx = std::max(mx, std::fabs(d));
          }
          const double rms = std::sqrt(ss / double(outs[0].size()));
          fmt::print("   check n={} walk vs {}: nmse {:.2e} max|d|/rms {:.3f} (rms {:.3g}) {}\n", n,
                     k == 1 ? "sorted16" : "sorted128", se / ss, mx / rms, rms,
                     (se / ss < 1e-4 && std::isfinite(se)) ? "OK" : "MISMATCH");
        }
      }
    }
   } catch (const std::exception& e) {
    fmt::print("{}: FAILED: {}\n", s.name, e.what());
    PG_CUDA_CHECK(cudaStreamSynchronize(stream));
   }
  }
  if (only_shapes.empty()) DenseFp8(stream, bw, gemm, json);
  if (json) std::fclose(json);
  cudaStreamDestroy(stream);
  return 0;
}
}  // namespace pg::bench

#ifndef PG_MOE_BENCH_NO_MAIN
int main(int argc, char** argv) { return pg::bench::RunMoeBench(argc, argv); }
#endif
