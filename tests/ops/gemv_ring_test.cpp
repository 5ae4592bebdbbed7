// The ring decode GEMV (kernels/cuda/gemm/gemv_ring.cu), launched through cuda::LaunchGemv
// with the ring forced on, against
//  * the CPU reference (ref Matmul / FusedMatmul on the same bf16-representable inputs, bf16
//    device tolerance as the op harness), and
//  * gemv.cu's warp kernel (the ring forced off) BITWISE: both sum a lane's 16-byte chunks in
//    the same order and share the epilogue (gemv_device.cuh), so any difference is a wrong
//    slot, row or chunk of the ring.
// Shapes: 1-4 rows, m not a multiple of 8 (and m < the SM count: blocks of one row), k =
// 96 / 1000 / 2048 / 2600 (a short last chunk) / 4096 / 14336, strided rows, a long slice per
// block (the ring wraps many times); options: bias, accumulate, f32 out, RMSNorm prologue
// (f32 and bf16 norm weights; preloaded into registers up to k 4096), SwiGLU epilogue; and
// fp8 e4m3 weights (per-tensor / per-row scales) against cuda/moe's f32 fp8 GEMV
// (LaunchFp8GemvF32).
// Also cuda/moe's tensor-core fp8 GEMV (Fp8GemvMmaKernel, LaunchFp8Gemv's default) against ref
// in every scale mode and kernel variant, 1-11 rows, and the variants against each other.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstring>

#include "core/quant.h"
#include "kernels/cuda/common/device_params.h"
#include "kernels/cuda/gemm/fp8_ring_mma.h"
#include "kernels/cuda/gemm/gemv_ring.h"
#include "kernels/cuda/moe/moe_params.h"
#include "kernels/ops_fused.h"
#include "gemv_test_util.h"
#include "op_test_util.h"

namespace pg::ops::testing {
namespace {

struct RingCase {
  int64_t n, k, m;
  bool norm = false, swiglu = false, bias = false, accumulate = false, f32_out = false;
  bool bf16_norm = false;
  int64_t pad = 0;  // extra elements per row of x, w and out (strided rows)
  std::string Name() const {
    return fmt::format("n={} k={} m={}{}{}{}{}{}{}", n, k, m, norm ? " norm" : "",
                       bf16_norm ? "(bf16)" : "", swiglu ? " swiglu" : "", bias ? " bias" : "",
                       accumulate ? " +=" : "", f32_out ? " f32" : "",
                       pad ? fmt::format(" pad {}", pad) : "");
  }
};

std::vector<RingCase> RingCases() {
  std::vector<RingCase> cases;
  for (int64_t n = 1; n <= 4; ++n) {
    cases.push_back({n, 96, 37});
    cases.push_back({n, 1000, 5, false, false, true});
    cases.push_back({n, 2048, 1031, false, false, false, true});
    cases.push_back({n, 2600, 333, false, false, true, false, true});
    cases.push_back({n, 4096, 777, true});
    cases.push_back({n, 4096, 2 * 389, true, true, n == 2});
    cases.push_back({n, 2048, 2 * 131, false, true});
    cases.push_back({n, 14336, 129, false, false, false, true, false, false, 8});
    cases.push_back({n, 2048, 128, false, false, false, false, true});  // a MoE router
    cases.push_back({n, 4096, 203, true, false, true, false, false, true, 8});
  }
  cases.push_back({1, 4096, 20000, true});   // ~150 rows a block: the ring wraps ~75 times
  cases.push_back({3, 4096, 9001, false});
  cases.push_back({4, 14336, 1025, false, false, false, true});
  // One row, accumulate: ~4 rows a warp (the outputs preloaded after the PDL wait) and ~38
  // (more than a warp's lanes: each row loads its own), both with the first fill round paced
  // (RingPlan::fill_inflight, 2 by default at k <= 8192; 40000 rows: the ring wraps, its first
  // round of 4 KB-piece slots waits for the slot two before); a norm of k 7168 (more than the
  // preloaded norm-weight registers hold: the global-load path). A run with
  // PEREGRINE_GEMV_RING_FILL_INFLIGHT=1 or 0 checks the other pacings (tools/gpu/jobs/s35h.sh).
  cases.push_back({1, 4096, 4096, false, false, false, true});
  cases.push_back({1, 2048, 40000, false, false, false, true, true});
  cases.push_back({1, 7168, 300, true});
  return cases;
}

struct Outputs {
  std::vector<float> ring, warp;  // [n, out_m], widened
  int64_t ring_launches = 0;
};

// Runs the case on the device with the ring on and off (same inputs, out re-initialised).
Outputs RunDevice(const RingCase& c, const Tensor& x, const Tensor& w, const Tensor& nw,
                  const Tensor& bias, const Tensor& out_init, int64_t out_m) {
  const int64_t ldx = c.k + c.pad, ldw = c.k + c.pad, ldo = out_m + c.pad;
  const std::vector<uint16_t> xb = Bf16Rows(x.data<float>(), c.n, c.k, ldx);
  std::vector<uint16_t> wb(size_t(c.m * ldw), 0);
  for (int64_t r = 0; r < c.m; ++r)
    std::memcpy(&wb[size_t(r * ldw)], w.view().row_ptr(r), size_t(c.k) * 2);
  Dev dx(xb.data(), xb.size() * 2), dw(wb.data(), wb.size() * 2);
  Dev dbias(bias.data<float>(), size_t(bias.numel()) * 4);
  const std::vector<uint16_t> nwb = Bf16Rows(nw.data<float>(), 1, c.k, c.k);
  Dev dnw(c.bf16_norm ? static_cast<const void*>(nwb.data()) : nw.data<float>(),
          size_t(c.k) * (c.bf16_norm ? 2 : 4));
  const size_t out_elems = size_t(c.n * ldo);
  Dev dout(out_elems * 4);
  cudaStream_t stream;
  PG_TEST_CUDA(cudaStreamCreate(&stream));
  Outputs o;
  const cuda::GemvRingMode mode = cuda::GetGemvRingMode();
  const cuda::Bf16RingMmaMode mma_mode = cuda::GetBf16RingMmaMode();
  for (bool ring : {true, false}) {
    // out's initial contents (accumulate), as bf16 or f32.
    std::vector<float> init_f(out_elems, 0.0f);
    for (int64_t r = 0; r < c.n; ++r)
      for (int64_t j = 0; j < out_m; ++j) init_f[size_t(r * ldo + j)] = out_init.data<float>()[r * out_m + j];
    if (c.f32_out) {
      PG_TEST_CUDA(cudaMemcpy(dout.p, init_f.data(), out_elems * 4, cudaMemcpyHostToDevice));
    } else {
      const std::vector<uint16_t> ib = Bf16Rows(init_f.data(), 1, int64_t(out_elems), int64_t(out_elems));
      PG_TEST_CUDA(cudaMemcpy(dout.p, ib.data(), out_elems * 2, cudaMemcpyHostToDevice));
    }
    cuda::GemvArgs a{static_cast<const cuda::bf16*>(dx.p), static_cast<const cuda::bf16*>(dw.p),
                     c.f32_out ? nullptr : static_cast<cuda::bf16*>(dout.p),
                     c.bias ? static_cast<const float*>(dbias.p) : nullptr,
                     c.n, c.k, c.swiglu ? c.m / 2 : c.m, ldx, ldw, ldo, c.accumulate};
    if (c.f32_out) a.out_f32 = static_cast<float*>(dout.p);
    a.w_constant = true;
    if (c.norm) {
      a.norm_weight = dnw.p;
      a.norm_type = c.bf16_norm ? cuda::WeightType::kBF16 : cuda::WeightType::kF32;
    }
    a.swiglu = c.swiglu;
    cuda::SetGemvRingMode(ring ? cuda::GemvRingMode::kOn : cuda::GemvRingMode::kOff);
    // The twin is the warp kernel: LaunchGemv's tensor-core ring (2-4 rows) stays off here.
    cuda::SetBf16RingMmaMode(cuda::Bf16RingMmaMode::kOff);
    EXPECT_EQ(cuda::GemvRingTake(a), ring) << "the ring refuses the case";
    const int64_t before = cuda::GemvRingLaunches();
    cuda::LaunchGemv(a, stream);
    PG_TEST_CUDA(cudaGetLastError());
    PG_TEST_CUDA(cudaStreamSynchronize(stream));
    if (ring) o.ring_launches = cuda::GemvRingLaunches() - before;
    std::vector<float> got(size_t(c.n * out_m));
    if (c.f32_out) {
      std::vector<float> h(out_elems);
      PG_TEST_CUDA(cudaMemcpy(h.data(), dout.p, out_elems * 4, cudaMemcpyDeviceToHost));
      for (int64_t r = 0; r < c.n; ++r)
        for (int64_t j = 0; j < out_m; ++j) got[size_t(r * out_m + j)] = h[size_t(r * ldo + j)];
    } else {
      std::vector<uint16_t> h(out_elems);
      PG_TEST_CUDA(cudaMemcpy(h.data(), dout.p, out_elems * 2, cudaMemcpyDeviceToHost));
      for (int64_t r = 0; r < c.n; ++r)
        for (int64_t j = 0; j < out_m; ++j) got[size_t(r * out_m + j)] = Bf16ToF32(h[size_t(r * ldo + j)]);
    }
    (ring ? o.ring : o.warp) = std::move(got);
  }
  cuda::SetGemvRingMode(mode);
  cuda::SetBf16RingMmaMode(mma_mode);
  PG_TEST_CUDA(cudaStreamDestroy(stream));
  return o;
}

TEST(GemvRing, MatchesTheReferenceAndTheWarpKernelBitwise) {
  PG_SEED_TRACE();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_FAIL() << "no CUDA device";
  for (const RingCase& c : RingCases()) {
    SCOPED_TRACE(c.Name());
    const int64_t out_m = c.swiglu ? c.m / 2 : c.m;
    Tensor x(DType::kF32, {c.n, c.k}), nw(DType::kF32, {c.k}), bias(DType::kF32, {c.m});
    FillNormal(x, 0.3f, 2.0f);  // mean off zero: a missing norm is visible
    FillUniform(nw, 0.5f, 1.5f);
    FillNormal(bias);
    RoundToBf16(x);
    RoundToBf16(nw);
    Tensor wf(DType::kF32, {c.m, c.k});
    FillNormal(wf, 0.0f, 0.05f);
    Tensor w(DType::kBF16, {c.m, c.k});
    for (int64_t r = 0; r < c.m; ++r)
      quant::QuantizeRow(DType::kBF16, wf.data<float>() + r * c.k, w.view().row_ptr(r), c.k);
    Tensor out_init(DType::kF32, {c.n, out_m});
    FillNormal(out_init);
    RoundToBf16(out_init);

    // Reference: FusedMatmul's composition (norm / swiglu), else Matmul (bias, accumulate).
    Tensor ref(DType::kF32, {c.n, out_m});
    Restore(ref, Copy(out_init));
    if (c.norm || c.swiglu) {
      Tensor normed(DType::kF32, {c.n, c.k}), projected(DType::kF32, {c.n, c.m});
      FusedMatmulParams p;
      p.x = x.view();
      if (c.norm) p.norm_weight = nw.view();
      p.eps = 1e-5f;
      p.w = w.view();
      if (c.bias) p.bias = bias.view();
      p.swiglu = c.swiglu;
      p.out = ref.view();
      p.normed = normed.view();
      p.projected = projected.view();
      RunWith(RefImpl<FusedMatmulParams>(), p);
    } else {
      MatmulParams p{.x = x.view(), .w = w.view(), .out = ref.view()};
      if (c.bias) p.bias = bias.view();
      p.accumulate = c.accumulate;
      RunWith(RefImpl<MatmulParams>(), p);
    }
    // Both forms of the staged x (bf16, and widened to f32 where the plan allows: one row, k
    // <= 4096 here) and at one row one or two weight rows a warp, each bitwise the warp kernel.
    for (int form = 0; form < 4; ++form) {
      const int xf32 = form % 2 ? 3 : 0, pair1 = form / 2 ? 0 : -1;
      if (c.n > 1 && pair1 == 0) continue;  // more rows always pair
      SCOPED_TRACE(fmt::format("x staged as {}, pairs {}", xf32 ? "f32" : "bf16", pair1 ? "by rule" : "off"));
      const int prev = cuda::SetGemvRingXF32(xf32), prev_pair = cuda::SetGemvRingPair1(pair1);
      const int64_t xf32_before = cuda::GemvRingXF32Launches();
      const Outputs o = RunDevice(c, x, w, nw, bias, out_init, out_m);
      const int64_t xf32_ran = cuda::GemvRingXF32Launches() - xf32_before;
      cuda::SetGemvRingXF32(prev);
      cuda::SetGemvRingPair1(prev_pair);
      EXPECT_EQ(o.ring_launches, 1) << "the ring kernel did not run";
      EXPECT_EQ(xf32_ran, xf32 && c.n == 1 && c.k <= 4096 ? 1 : 0) << "the f32 staging's route";
      const Tolerance tol = c.swiglu ? Tolerance{0.08, 1e-4} : kBf16;  // fused_matmul_test.cpp
      ExpectClose(ref.data<float>(), o.ring.data(), ref.numel(), tol, "ring vs ref " + c.Name());
      ExpectClose(ref.data<float>(), o.warp.data(), ref.numel(), tol, "warp vs ref " + c.Name());
      ExpectExact(o.warp.data(), o.ring.data(), ref.numel(), "ring vs warp kernel " + c.Name());
    }
  }
}

// fp8 e4m3 weights (the dense fp8 Matmul at <= 4 rows): the ring against ref (Matmul with
// w_scale) and bitwise against cuda/moe's f32 Fp8GemvKernel (LaunchFp8GemvF32; the tensor-core
// kernel sums in another order: checked against ref here and in Fp8Gemv.* below);
// per-tensor and per-row scales.
struct Fp8Case {
  int64_t n, k, m;
  bool per_row = false, bias = false, accumulate = false;
  std::string Name() const {
    return fmt::format("fp8 n={} k={} m={}{}{}{}", n, k, m, per_row ? " per-row" : " per-tensor",
                       bias ? " bias" : "", accumulate ? " +=" : "");
  }
};

TEST(GemvRing, Fp8MatchesTheReferenceAndTheWarpKernelBitwise) {
  PG_SEED_TRACE();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_FAIL() << "no CUDA device";
  std::vector<Fp8Case> cases;
  for (int64_t n = 1; n <= 4; ++n) {
    cases.push_back({n, 96, 37});
    cases.push_back({n, 2048, 1031, true});
    cases.push_back({n, 4096, 333, false, true});
    cases.push_back({n, 14336, 129, true, false, true});
    cases.push_back({n, 2064, 700, false, true, true});  // a 16-column last piece
  }
  cases.push_back({1, 4096, 20000, true});
  for (const Fp8Case& c : cases) {
    SCOPED_TRACE(c.Name());
    const auto pr = MakeFp8Problem({c.n, c.k, c.m, c.per_row ? cuda::ScaleMode::kChannel : cuda::ScaleMode::kTensor,
                                    c.bias, c.accumulate});
    const cuda::Fp8GemvArgs& a = pr->args;
    const Tensor& ref = pr->ref.ref;
    const cuda::GemvRingMode mode = cuda::GetGemvRingMode();
    cuda::SetGemvRingMode(cuda::GemvRingMode::kOn);
    EXPECT_TRUE(cuda::Fp8GemvRingTake(a));
    cuda::SetGemvRingMode(mode);
    std::vector<float> got[3];  // f32 kernel, ring, LaunchFp8Gemv (tensor cores)
    got[0] = pr->Run([&] { cuda::LaunchFp8GemvF32(a, nullptr); });
    got[1] = pr->Run([&] { cuda::LaunchFp8GemvRing(a, nullptr); });
    got[2] = pr->Run([&] { cuda::LaunchFp8Gemv(a, nullptr); });
    ExpectClose(ref.data<float>(), got[1].data(), ref.numel(), kBf16, "fp8 ring vs ref " + c.Name());
    ExpectClose(ref.data<float>(), got[0].data(), ref.numel(), kBf16, "fp8 warp vs ref " + c.Name());
    ExpectClose(ref.data<float>(), got[2].data(), ref.numel(), kBf16, "fp8 mma vs ref " + c.Name());
    ExpectExact(got[0].data(), got[1].data(), ref.numel(), "fp8 ring vs warp kernel " + c.Name());
  }
}

// The tensor-core fp8 GEMV (cuda/moe/fp8_gemv.cu Fp8GemvMmaKernel) against ref, every scale
// mode (per tensor, per row, 128x128 blocks), 1-11 activation rows (passes of 8), k from one
// 64-column step to 18432 (split k over 1, 2, 4 and 8 warps; block mode with a half last
// block), m not a multiple of 16, bias, accumulate, strided x; every kernel variant
// (Fp8GemvVariant: depth 3 / 4 / 6, chunk 1 / 2, interleaved steps or ranges), the depths
// BITWISE equal (same summation order). Weights: e4m3 of N(0, 1), or (`subnormal`) only the
// 16 subnormal / zero patterns (|w| <= 7 * 2^-9: a bf16 subnormal times 2^-120 in the kernel;
// a tensor core flushing them would give nmse ~1), or (`all_codes`) uniform over all 254
// finite codes.
struct MmaCase {
  int64_t n, k, m;
  cuda::ScaleMode mode;
  bool bias = false, accumulate = false, subnormal = false, all_codes = false;
  int64_t xpad = 0;
  std::string Name() const {
    return fmt::format("mma n={} k={} m={} {}{}{}{}{}{}", n, k, m,
                       mode == cuda::ScaleMode::kTensor ? "tensor" : mode == cuda::ScaleMode::kChannel ? "row" : "block",
                       bias ? " bias" : "", accumulate ? " +=" : "", subnormal ? " subnormal" : "",
                       all_codes ? " all-codes" : "", xpad ? " xpad" : "");
  }
};

TEST(Fp8Gemv, MmaKernelMatchesTheReferenceInEveryVariant) {
  PG_SEED_TRACE();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_FAIL() << "no CUDA device";
  using M = cuda::ScaleMode;
  std::vector<MmaCase> cases;
  for (M mode : {M::kTensor, M::kChannel, M::kBlock}) {
    for (int64_t n : {1, 2, 3, 4, 8}) {
      cases.push_back({n, 64, 37, mode});
      cases.push_back({n, 576, 129, mode, true});
      cases.push_back({n, 1536, 333, mode, false, true});
      cases.push_back({n, 4096, 1000, mode, true, true, false, false, 8});
    }
    cases.push_back({1, 7168, 2112, mode});
    cases.push_back({4, 18432, 300, mode, false, true});
    cases.push_back({11, 2048, 200, mode, true});
    cases.push_back({1, 512, 4099, mode});
    cases.push_back({2, 4096, 64, mode, false, false, true});
    cases.push_back({3, 1024, 77, mode, false, false, false, true});
  }
  const cuda::Fp8GemvVariant saved = cuda::GetFp8GemvVariant();
  for (const MmaCase& c : cases) {
    SCOPED_TRACE(c.Name());
    const auto pr = MakeFp8Problem(
        {c.n, c.k, c.m, c.mode, c.bias, c.accumulate, c.xpad,
         c.subnormal ? Fp8Weights::kSubnormal : c.all_codes ? Fp8Weights::kAllCodes : Fp8Weights::kNormal,
         c.subnormal ? 1.0f : 0.01f, c.subnormal ? 2.0f : 0.03f});
    const cuda::Fp8GemvArgs& a = pr->args;
    const Tensor& ref = pr->ref.ref;
    // Variants: depth 3 / 4 / 6 x chunk 1 / 2 x interleave, then the f32 kernel. The depth
    // does not change the summation: bitwise equal within a (chunk, interleave) pair.
    std::vector<float> first[2][2];
    for (int vi = 0; vi <= 14; ++vi) {  // 12, 13: with L2 prefetch (chunk 1 / 2); 14: f32
      cuda::Fp8GemvVariant v;
      v.ring = 0;  // this kernel, not gemm/fp8_ring_mma.cu's (fp8_ring_mma_test.cpp)
      v.mma = vi < 14;
      v.depth = vi % 3 == 0 ? 3 : vi % 3 == 1 ? 4 : 6;
      v.chunk = (vi / 3) % 2 + 1;
      v.interleave = vi / 6 == 1;
      if (vi >= 12) v.depth = 4, v.chunk = vi - 11, v.interleave = false, v.prefetch = 8;
      const std::string what = v.mma ? fmt::format("mma depth {} chunk {} interleave {} prefetch {} ",
                                                   v.depth, v.chunk, int(v.interleave), v.prefetch)
                                     : std::string("f32 kernel ");
      cuda::SetFp8GemvVariant(v);
      const std::vector<float> got = pr->Run([&] { cuda::LaunchFp8Gemv(a, nullptr); });
      ExpectClose(ref.data<float>(), got.data(), ref.numel(), kBf16, what + "vs ref");
      if (!v.mma) continue;
      std::vector<float>& f = first[v.chunk - 1][v.interleave];
      if (f.empty()) f = got;
      else ExpectExact(f.data(), got.data(), ref.numel(), what + "vs depth 3");
    }
  }
  cuda::SetFp8GemvVariant(saved);
}

TEST(GemvRing, RefusesWhatItCannotStage) {
  cuda::GemvArgs a{reinterpret_cast<const cuda::bf16*>(uintptr_t(256)),
                   reinterpret_cast<const cuda::bf16*>(uintptr_t(512)),
                   reinterpret_cast<cuda::bf16*>(uintptr_t(1024)), nullptr, 1, 4096, 64, 4096, 4096, 64,
                   false};
  const cuda::GemvRingMode mode = cuda::GetGemvRingMode();
  cuda::SetGemvRingMode(cuda::GemvRingMode::kOn);
  EXPECT_TRUE(cuda::GemvRingTake(a));
  a.n = 5;
  EXPECT_FALSE(cuda::GemvRingTake(a)) << "5 rows";
  a.n = 4;
  a.k = 4100;
  EXPECT_FALSE(cuda::GemvRingTake(a)) << "k % 8 != 0";
  a.k = 14336, a.ldx = 14336, a.ldw = 14336;
  EXPECT_TRUE(cuda::GemvRingTake(a));
  a.norm_weight = &a;  // 4 x 14336 normalised rows: more than the ring's x staging
  EXPECT_FALSE(cuda::GemvRingTake(a)) << "norm staging";
  cuda::SetGemvRingMode(cuda::GemvRingMode::kOff);
  a.norm_weight = nullptr;
  EXPECT_FALSE(cuda::GemvRingTake(a)) << "mode off";
  cuda::SetGemvRingMode(mode);
}

// The shape rule (kShape, the default): one row and k >= 4096; or a normed projection of
// 4096-65536 rows from k = 2048 (an attention's qkv, Qwen3-30B-A3B: the small decode attention
// fits beside the ring's one block an SM), not the lm_heads nor 2-4 rows nor smaller outputs.
TEST(GemvRing, ShapeRuleTakesLargeKAndNormedQkvProjections) {
  auto args = [](int64_t n, int64_t k, int64_t m, bool norm) {
    cuda::GemvArgs a{reinterpret_cast<const cuda::bf16*>(uintptr_t(256)),
                     reinterpret_cast<const cuda::bf16*>(uintptr_t(512)),
                     reinterpret_cast<cuda::bf16*>(uintptr_t(1024)), nullptr, n, k, m, k, k, m,
                     false};
    static const float w = 1.0f;
    if (norm) a.norm_weight = &w;
    return a;
  };
  const cuda::GemvRingMode mode = cuda::GetGemvRingMode();
  cuda::SetGemvRingMode(cuda::GemvRingMode::kShape);
  EXPECT_TRUE(cuda::GemvRingTake(args(1, 4096, 4096, false))) << "Llama o";
  EXPECT_TRUE(cuda::GemvRingTake(args(1, 4096, 128256, true))) << "Llama lm_head";
  EXPECT_TRUE(cuda::GemvRingTake(args(1, 2048, 5120, true))) << "Qwen3-30B-A3B qkv + norm";
  EXPECT_FALSE(cuda::GemvRingTake(args(1, 2048, 151936, true))) << "Qwen3-30B-A3B lm_head";
  EXPECT_FALSE(cuda::GemvRingTake(args(1, 2048, 3648, true))) << "DeepSeek-V2-Lite q + kv_a";
  EXPECT_FALSE(cuda::GemvRingTake(args(1, 2048, 5120, false))) << "no norm";
  EXPECT_FALSE(cuda::GemvRingTake(args(1, 1024, 5120, true))) << "k 1024";
  EXPECT_FALSE(cuda::GemvRingTake(args(2, 2048, 5120, true))) << "2 rows";
  EXPECT_FALSE(cuda::GemvRingTake(args(2, 4096, 4096, false))) << "2 rows, k 4096";
  cuda::SetGemvRingMode(mode);
}

}  // namespace
}  // namespace pg::ops::testing
