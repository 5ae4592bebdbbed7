// MegaPlan (ops_mega.h, the persistent batch-1 decode kernel) on the GPU, against
//  * the CPU reference: the same steps through the reference-backed composition on f32 host
//    tensors (RunMegaStepsComposed on the CPU), bf16 chain tolerance;
//  * the CUDA composition (FusedMatmul / Matmul accumulate on their CUDA backends), which the
//    kernel's tile mode (PEREGRINE_MEGA_TILES=1) must match BITWISE (same summation order and
//    rounding points); the default row mode sums a row's column pieces in another order, so
//    it is held to the composition at bf16 rounding (outputs 1 ulp apart at most per op);
// on an awkward shape (partial tiles, partial 1024-column chunks, bias) and the Llama-3.1-8B
// layer shape, in one launch and in several launches (the model's split around attention), and
// over 50 CUDA-graph replays (the step counters re-arm; a race shows as a differing replay).
// The attention step (one new token) against the reference RopeKvWrite + Attention on f32 host
// caches: GQA 1-4, page sizes 7 and 16, contexts 1 .. 33K (one split .. many per kv head, the
// in-kernel split merge), the cache slot it writes, and 20 replays (merge counters re-arm).
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/batch_plan.h"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/ops_mega.h"
#include "op_test_util.h"

namespace pg::ops::testing {
namespace {

struct Shape {
  int64_t h, qkv, qd, f;  // hidden, qkv rows, o's input width (<= qkv), intermediate
  int layers;
  bool bias;
};

// A device bf16 copy of host f32 values (which are bf16-representable).
struct DevBf16 {
  void* p = nullptr;
  int64_t n = 0;
  explicit DevBf16(const std::vector<float>& v) : n(int64_t(v.size())) {
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = F32ToBf16(v[i]);
    PG_CUDA_CHECK(cudaMalloc(&p, b.size() * 2));
    PG_CUDA_CHECK(cudaMemcpy(p, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  }
  ~DevBf16() { cudaFree(p); }
  std::vector<uint16_t> Bits() const {
    std::vector<uint16_t> b(static_cast<size_t>(n));
    PG_CUDA_CHECK(cudaMemcpy(b.data(), p, b.size() * 2, cudaMemcpyDeviceToHost));
    return b;
  }
  std::vector<float> Values() const {
    std::vector<float> f;
    for (uint16_t u : Bits()) f.push_back(Bf16ToF32(u));
    return f;
  }
  void Set(const std::vector<float>& v) {
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = F32ToBf16(v[i]);
    PG_CUDA_CHECK(cudaMemcpy(p, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  }
  DevBf16(const DevBf16&) = delete;
  DevBf16& operator=(const DevBf16&) = delete;
};

struct DevF32 {
  void* p = nullptr;
  explicit DevF32(const std::vector<float>& v) {
    PG_CUDA_CHECK(cudaMalloc(&p, v.size() * 4));
    PG_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
  }
  ~DevF32() { cudaFree(p); }
  DevF32(const DevF32&) = delete;
  DevF32& operator=(const DevF32&) = delete;
};

std::vector<float> RandomBf16(int64_t n, float mean, float stddev) {
  Tensor t(DType::kF32, {n});
  FillNormal(t, mean, stddev);
  RoundToBf16(t);
  return Copy(t);
}

std::vector<float> RandomUniform(int64_t n, float lo, float hi) {
  Tensor t(DType::kF32, {n});
  FillUniform(t, lo, hi);
  return Copy(t);
}

// One model chain: per layer norm+qkv, o (+= x; input: the first qd entries of qkv, standing
// in for attention), norm+gate_up+swiglu, down (+= x). Host tensors (f32) and device mirrors.
struct Chain {
  Shape s;
  struct Layer {
    std::vector<float> wqkv, wo, wgu, wd, n1, n2, bias;
  };
  std::vector<Layer> layers;
  std::vector<float> x0;

  explicit Chain(const Shape& shape) : s(shape) {
    for (int l = 0; l < s.layers; ++l) {
      Layer L;
      L.wqkv = RandomBf16(s.qkv * s.h, 0.0f, 1.0f / std::sqrt(float(s.h)));
      L.wo = RandomBf16(s.h * s.qd, 0.0f, 0.5f / std::sqrt(float(s.qd)));
      L.wgu = RandomBf16(2 * s.f * s.h, 0.0f, 1.0f / std::sqrt(float(s.h)));
      L.wd = RandomBf16(s.h * s.f, 0.0f, 0.5f / std::sqrt(float(s.f)));
      L.n1 = RandomUniform(s.h, 0.5f, 1.5f);
      L.n2 = RandomUniform(s.h, 0.5f, 1.5f);
      if (s.bias) L.bias = RandomBf16(s.qkv, 0.0f, 0.5f);
      layers.push_back(std::move(L));
    }
    x0 = RandomBf16(s.h, 0.3f, 2.0f);  // mean off zero: a missing norm is visible
  }
};

// Buffers + steps of a chain on one device (CPU f32 or CUDA bf16).
struct ChainRun {
  std::vector<MegaStepParams> steps;
};

TensorView V(void* p, DType dt, std::initializer_list<int64_t> shape, Device d) {
  return TensorView::Contiguous(p, dt, shape, d);
}

std::vector<MegaStepParams> Steps(const Shape& s, const std::vector<void*>& w,
                                  const std::vector<void*>& norms, const std::vector<void*>& bias,
                                  void* x, void* qkv, void* act, DType dt, Device dev,
                                  void* projected = nullptr) {
  std::vector<MegaStepParams> steps;
  const DType nd = DType::kF32;
  for (int l = 0; l < s.layers; ++l) {
    steps.push_back({.kind = MegaStepKind::kNormProject, .x = V(x, dt, {1, s.h}, dev),
                     .norm_weight = V(norms[2 * l], nd, {s.h}, dev), .eps = 1e-5f,
                     .w = V(w[4 * l], dt, {s.qkv, s.h}, dev),
                     .bias = bias[l] ? V(bias[l], DType::kF32, {s.qkv}, dev) : TensorView{},
                     .out = V(qkv, dt, {1, s.qkv}, dev)});
    steps.push_back({.kind = MegaStepKind::kAccumulate, .x = V(qkv, dt, {1, s.qd}, dev),
                     .w = V(w[4 * l + 1], dt, {s.h, s.qd}, dev), .out = V(x, dt, {1, s.h}, dev)});
    steps.push_back({.kind = MegaStepKind::kNormSwiGlu, .x = V(x, dt, {1, s.h}, dev),
                     .norm_weight = V(norms[2 * l + 1], nd, {s.h}, dev), .eps = 1e-5f,
                     .w = V(w[4 * l + 2], dt, {2 * s.f, s.h}, dev),
                     .out = V(act, dt, {1, s.f}, dev),
                     .projected = projected ? V(projected, dt, {1, 2 * s.f}, dev) : TensorView{}});
    steps.push_back({.kind = MegaStepKind::kAccumulate, .x = V(act, dt, {1, s.f}, dev),
                     .w = V(w[4 * l + 3], dt, {s.h, s.f}, dev), .out = V(x, dt, {1, s.h}, dev)});
  }
  return steps;
}

// The CPU reference: x after the chain (f32, no intermediate rounding beyond the ops').
std::vector<float> HostReference(const Chain& c) {
  const Shape& s = c.s;
  std::vector<void*> w, norms, bias;
  auto ptr = [](const std::vector<float>& v) { return static_cast<void*>(const_cast<float*>(v.data())); };
  for (const auto& L : c.layers) {
    w.insert(w.end(), {ptr(L.wqkv), ptr(L.wo), ptr(L.wgu), ptr(L.wd)});
    norms.insert(norms.end(), {ptr(L.n1), ptr(L.n2)});
    bias.push_back(s.bias ? ptr(L.bias) : nullptr);
  }
  std::vector<float> x = c.x0, qkv(size_t(s.qkv)), act(size_t(s.f));
  std::vector<float> normed(size_t(std::max(s.h, s.f))), projected(size_t(2 * s.f + s.qkv));
  auto steps = Steps(s, w, norms, bias, x.data(), qkv.data(), act.data(), DType::kF32,
                     Device::kCpu);
  RunMegaStepsComposed(steps, V(normed.data(), DType::kF32, {1, s.h}, Device::kCpu),
                       V(projected.data(), DType::kF32, {1, 2 * s.f}, Device::kCpu));
  return x;
}

struct DeviceChain {
  std::vector<std::unique_ptr<DevBf16>> w;
  std::vector<std::unique_ptr<DevF32>> norms, bias;
  DevBf16 x, qkv, act, normed, projected, x0;
  std::vector<MegaStepParams> steps;

  explicit DeviceChain(const Chain& c)
      : x(c.x0), qkv(std::vector<float>(size_t(c.s.qkv), 0.0f)),
        act(std::vector<float>(size_t(c.s.f), 0.0f)),
        normed(std::vector<float>(size_t(c.s.h), 0.0f)),
        projected(std::vector<float>(size_t(2 * c.s.f), 0.0f)), x0(c.x0) {
    std::vector<void*> wp, np, bp;
    for (const auto& L : c.layers) {
      for (const auto* m : {&L.wqkv, &L.wo, &L.wgu, &L.wd}) {
        w.push_back(std::make_unique<DevBf16>(*m));
        wp.push_back(w.back()->p);
      }
      for (const auto* m : {&L.n1, &L.n2}) {
        norms.push_back(std::make_unique<DevF32>(*m));
        np.push_back(norms.back()->p);
      }
      if (c.s.bias) {
        bias.push_back(std::make_unique<DevF32>(L.bias));
        bp.push_back(bias.back()->p);
      } else {
        bp.push_back(nullptr);
      }
    }
    steps = Steps(c.s, wp, np, bp, x.p, qkv.p, act.p, DType::kBF16, Device::kCuda, projected.p);
  }
  void ResetX() {
    PG_CUDA_CHECK(cudaMemcpyAsync(x.p, x0.p, size_t(x.n) * 2, cudaMemcpyDeviceToDevice,
                                  cuda::CurrentStream()));
  }
};

void ExpectBitwise(const std::vector<uint16_t>& want, const std::vector<uint16_t>& got,
                   const std::string& what) {
  ASSERT_EQ(want.size(), got.size());
  int64_t diff = 0, first = -1;
  for (size_t i = 0; i < want.size(); ++i)
    if (want[i] != got[i]) diff++, first = first < 0 ? int64_t(i) : first;
  EXPECT_EQ(diff, 0) << what << ": " << diff << " of " << want.size()
                     << " elements differ; first at " << first << " ("
                     << (first >= 0 ? Bf16ToF32(want[size_t(first)]) : 0.0f) << " vs "
                     << (first >= 0 ? Bf16ToF32(got[size_t(first)]) : 0.0f) << ")";
}

// Row mode against the composition: each op's outputs may differ by a bf16 rounding flip
// (2^-8 relative) from the f32 reassociation; chained over a few layers that stays well below
// 1% of the output scale.
constexpr Tolerance kRowMode{3e-2, 5e-5};

// SwiGLU outputs (act) round three times and reach ~10x their rms: the fused-matmul harness's
// bound (fused_matmul_test.cpp kBf16SwiGlu).
constexpr Tolerance kRowModeSwiGlu{0.08, 1e-4};

void ExpectNear(const std::vector<uint16_t>& want, const std::vector<uint16_t>& got,
                const std::string& what, Tolerance tol = kRowMode) {
  std::vector<float> w, g;
  for (uint16_t u : want) w.push_back(Bf16ToF32(u));
  for (uint16_t u : got) g.push_back(Bf16ToF32(u));
  ExpectClose(w.data(), g.data(), int64_t(w.size()), tol, what);
}

enum class Mode { kTiles, kRows, kWarp };

// kTiles and kWarp (PEREGRINE_MEGA_TILES / PEREGRINE_MEGA_WARP) sum as the fused GEMV ops:
// bitwise; kRows: at bf16 rounding. The warp mode writes no act (the down step stages
// silu(gate) * up itself), so act is checked in the other two.
void CheckShape(const Chain& c, const std::vector<float>& host_ref, Mode mode) {
  if (cuda::DeviceCount() == 0) GTEST_FAIL() << "no CUDA device: this binary runs on the GPU";
  SCOPED_TRACE(mode == Mode::kTiles ? "tile mode" : mode == Mode::kRows ? "row mode" : "warp mode");
  const bool tiles = mode != Mode::kRows;
  const Shape& s = c.s;
  DeviceChain d(c);
  std::string why;
  if (mode == Mode::kTiles) setenv("PEREGRINE_MEGA_TILES", "1", 1);
  setenv("PEREGRINE_MEGA_WARP", mode == Mode::kWarp ? "1" : "0", 1);
  auto plan = MakeMegaPlan(d.steps, &why);
  unsetenv("PEREGRINE_MEGA_TILES");
  unsetenv("PEREGRINE_MEGA_WARP");
  auto expect = [&](const std::vector<uint16_t>& want, const std::vector<uint16_t>& got,
                    const std::string& what) {
    if (tiles) ExpectBitwise(want, got, what);
    else ExpectNear(want, got, what, what.starts_with("act") ? kRowModeSwiGlu : kRowMode);
  };
  ASSERT_TRUE(plan) << why;
  ASSERT_EQ(plan->num_steps(), 4 * s.layers);

  // The CUDA composition (the existing ops): x, qkv, act after the chain.
  d.ResetX();
  RunMegaStepsComposed(d.steps, V(d.normed.p, DType::kBF16, {1, s.h}, Device::kCuda),
                       V(d.projected.p, DType::kBF16, {1, 2 * s.f}, Device::kCuda));
  PG_CUDA_CHECK(cudaDeviceSynchronize());
  const auto want_x = d.x.Bits(), want_qkv = d.qkv.Bits(), want_act = d.act.Bits();

  // One launch.
  d.ResetX();
  plan->Run(0, plan->num_steps());
  PG_CUDA_CHECK(cudaDeviceSynchronize());
  expect(want_x, d.x.Bits(), "x, one launch");
  expect(want_qkv, d.qkv.Bits(), "qkv, one launch");
  if (mode != Mode::kWarp) expect(want_act, d.act.Bits(), "act, one launch");
  const std::vector<uint16_t> one_launch = d.x.Bits();

  // Against the CPU reference.
  const std::vector<float> got = d.x.Values();
  ExpectClose(host_ref.data(), got.data(), s.h, Tolerance{0.06, 2e-4}, "x vs CPU reference");

  // The model's split: step 0, then [o, gate_up, down, next qkv] per layer.
  d.ResetX();
  plan->Run(0, 1);
  for (int b = 1; b < plan->num_steps(); b += 4) plan->Run(b, std::min(b + 4, plan->num_steps()));
  PG_CUDA_CHECK(cudaDeviceSynchronize());
  ExpectBitwise(one_launch, d.x.Bits(), "x, launches split per layer vs one launch");

  // 50 replays of a captured graph (reset x, whole chain): every replay the same bits.
  cudaStream_t st;
  PG_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  {
    cuda::StreamScope scope(st);
    cudaGraph_t g;
    cudaGraphExec_t ge;
    PG_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    d.ResetX();
    plan->Run(0, plan->num_steps());
    PG_CUDA_CHECK(cudaStreamEndCapture(st, &g));
    PG_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
    int bad = 0;
    for (int r = 0; r < 50; ++r) {
      PG_CUDA_CHECK(cudaMemsetAsync(d.act.p, 0, size_t(s.f) * 2, st));
      PG_CUDA_CHECK(cudaGraphLaunch(ge, st));
      PG_CUDA_CHECK(cudaStreamSynchronize(st));
      bad += d.x.Bits() != one_launch;
    }
    EXPECT_EQ(bad, 0) << "graph replays with different outputs (of 50)";
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  }
  cudaStreamDestroy(st);
}

TEST(MegaPlanGpu, AwkwardShapeMatchesCompositionBitwiseAndReference) {
  PG_SEED_TRACE();
  Chain c({.h = 264, .qkv = 203, .qd = 136, .f = 1048, .layers = 3, .bias = true});
  const std::vector<float> ref = HostReference(c);
  for (Mode m : {Mode::kTiles, Mode::kRows, Mode::kWarp}) CheckShape(c, ref, m);
}

TEST(MegaPlanGpu, Llama8BLayerMatchesCompositionBitwiseAndReference) {
  PG_SEED_TRACE();
  // One layer (the CPU reference of the 8B matrices is the slow part; the awkward shape
  // covers the layer-to-layer dependencies).
  Chain c({.h = 4096, .qkv = 6144, .qd = 4096, .f = 14336, .layers = 1, .bias = false});
  const std::vector<float> ref = HostReference(c);
  for (Mode m : {Mode::kTiles, Mode::kRows, Mode::kWarp}) CheckShape(c, ref, m);
}

TEST(MegaPlanGpu, RefusesWhatTheKernelCannotRun) {
  if (cuda::DeviceCount() == 0) GTEST_FAIL() << "no CUDA device";
  Shape s{.h = 100, .qkv = 40, .qd = 40, .f = 64, .layers = 1, .bias = false};  // k % 8 != 0
  Chain c(s);
  DeviceChain d(c);
  std::string why;
  EXPECT_FALSE(MakeMegaPlan(d.steps, &why));
  EXPECT_NE(why.find("16-byte"), std::string::npos) << why;
}

struct AttnCase {
  int heads, kv_heads, kv_len, page_size;
};

void CheckAttention(const AttnCase& c) {
  SCOPED_TRACE(fmt::format("{}:{} kv_len {} page {}", c.heads, c.kv_heads, c.kv_len, c.page_size));
  constexpr int kHd = 128;
  const int64_t qd = int64_t(c.heads) * kHd, kvd = int64_t(c.kv_heads) * kHd, row = qd + 2 * kvd;
  const int pages = (c.kv_len + c.page_size - 1) / c.page_size;
  const int64_t num_pages = pages + 2;
  std::vector<int32_t> perm(size_t(num_pages), 0);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), Rng());
  const std::vector<int32_t> q_start{0}, q_len{1}, kv_len{c.kv_len}, page_start{0},
      page_table(perm.begin(), perm.begin() + pages);
  AttentionBatch batch{1, c.page_size, q_start, q_len, kv_len, page_start, page_table};
  RopeConfig rope;
  rope.theta = 500000.0f;
  rope.scaling = RopeScaling::kLlama3;
  rope.factor = 8.0f;

  const std::vector<float> qkv = RandomBf16(row, 0.0f, 1.0f);
  Tensor kc(DType::kF32, {num_pages, c.page_size, c.kv_heads, kHd}),
      vc(DType::kF32, {num_pages, c.page_size, c.kv_heads, kHd});
  FillNormal(kc);
  FillNormal(vc);
  RoundToBf16(kc);
  RoundToBf16(vc);
  const std::vector<float> k0 = Copy(kc), v0 = Copy(vc);
  // Reference: RopeKvWrite then Attention on f32 host tensors.
  Tensor q(DType::kF32, {1, c.heads, kHd}), k(DType::kF32, {1, c.kv_heads, kHd}),
      v(DType::kF32, {1, c.kv_heads, kHd}), ref(DType::kF32, {1, c.heads, kHd});
  std::copy(qkv.begin(), qkv.begin() + qd, q.data<float>());
  std::copy(qkv.begin() + qd, qkv.begin() + qd + kvd, k.data<float>());
  std::copy(qkv.begin() + qd + kvd, qkv.end(), v.data<float>());
  int32_t pos = c.kv_len - 1;
  const TensorView positions = TensorView::Contiguous(&pos, DType::kI32, {1});
  RefImpl<RopeKvWriteParams>().run({.q = q.view(), .k = k.view(), .v = v.view(),
                                    .positions = positions, .config = rope,
                                    .cache = {kc.view(), vc.view()}, .batch = &batch});
  RefImpl<AttentionParams>().run({.q = q.view(), .out = ref.view(), .cache = {kc.view(), vc.view()},
                                  .batch = &batch});

  // Device: the same inputs, one attention step.
  DevBf16 dqkv(qkv), dout(std::vector<float>(size_t(qd), 0.0f)), dk(k0), dv(v0);
  cuda::DeviceBatchPlan bp;
  bp.Reserve(1, 1, pages);
  bp.Upload(batch, cuda::CurrentStream());
  AttentionBatch dbatch = batch;
  dbatch.device = &bp.view();
  const std::vector<int64_t> cache_shape{num_pages, c.page_size, c.kv_heads, kHd};
  const KvCacheView dcache{TensorView::Contiguous(dk.p, DType::kBF16, cache_shape.data(), 4, Device::kCuda),
                           TensorView::Contiguous(dv.p, DType::kBF16, cache_shape.data(), 4, Device::kCuda)};
  const MegaStepParams step{.kind = MegaStepKind::kAttention,
                            .x = V(dqkv.p, DType::kBF16, {1, row}, Device::kCuda),
                            .out = V(dout.p, DType::kBF16, {1, qd}, Device::kCuda), .layer = 0,
                            .heads = c.heads, .kv_heads = c.kv_heads, .head_dim = kHd, .rope = rope};
  std::string why;
  auto plan = MakeMegaPlan(std::span<const MegaStepParams>(&step, 1), &why);
  ASSERT_TRUE(plan) << why;
  const MegaRunInputs in{.batch = &dbatch, .caches = std::span<const KvCacheView>(&dcache, 1)};
  ASSERT_TRUE(MegaAttentionFits(in));
  plan->Run(0, 1, in);
  PG_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got = dout.Values();
  ExpectClose(ref.data<float>(), got.data(), qd, kBf16Attention, "attention output");
  // The new token's slot: rotated k (rounded to bf16 before the cache, as RopeKvWrite) and v.
  const int64_t slot = (int64_t(page_table[size_t(pos / c.page_size)]) * c.page_size +
                        pos % c.page_size) * kvd;
  const std::vector<float> kd = dk.Values(), vd = dv.Values();
  double kerr = 0, verr = 0;
  for (int64_t i = 0; i < kvd; ++i) {
    kerr = std::max(kerr, double(std::fabs(kd[size_t(slot + i)] - kc.data<float>()[slot + i])) /
                              std::max(1e-3, double(std::fabs(kc.data<float>()[slot + i]))));
    verr = std::max(verr, double(std::fabs(vd[size_t(slot + i)] - vc.data<float>()[slot + i])));
  }
  EXPECT_LE(kerr, 1.0 / 256) << "rotated k in the cache (bf16: 2^-8 relative)";
  EXPECT_EQ(verr, 0.0) << "v in the cache";
  // Replays: the split-merge counters re-arm (same bits every time).
  int bad = 0;
  const std::vector<uint16_t> bits = dout.Bits();
  for (int r = 0; r < 20; ++r) {
    plan->Run(0, 1, in);
    bad += dout.Bits() != bits;
  }
  EXPECT_EQ(bad, 0) << "replays with different attention outputs (of 20)";
}

TEST(MegaPlanGpu, AttentionStepMatchesReference) {
  if (cuda::DeviceCount() == 0) GTEST_FAIL() << "no CUDA device: this binary runs on the GPU";
  PG_SEED_TRACE();
  for (const AttnCase& c : {AttnCase{4, 2, 1, 16}, AttnCase{4, 2, 150, 16}, AttnCase{2, 1, 1000, 7},
                            AttnCase{32, 8, 1024, 16}, AttnCase{3, 1, 4100, 16},
                            AttnCase{32, 8, 33000, 16}})
    CheckAttention(c);
}

}  // namespace
}  // namespace pg::ops::testing
