// The ring tensor-core GEMV on bf16 weights (kernels/cuda/gemm/fp8_ring_mma.cu, kBf16W; the
// dense decode GEMV at 2-8 rows) against
//  * the CPU reference (ref Matmul on the same bf16-representable x and w, f32) at the bf16
//    device tolerance (kBf16): the products are exact in the MMA, so the kernel differs from
//    ref only by f32 summation order and the final bf16 rounding;
//  * itself BITWISE across ring layouts of the same consumer warp count (the summation order
//    depends only on it): 2 KB row pieces in 4 slots, whole 16-row groups in one copy, 1 / 4 /
//    6 KB pieces, x from global or staged in shared memory, 1 or 2 blocks an SM (and the
//    kernel of 2 with one block's shared memory, ring_blocks 4), the first fill round paced
//    (ring_fill_inflight 1, 2, and -1: by the rule); 8 and 16 consumer warps. A difference is
//    a wrong slot, row, piece or step.
// Shapes: 1-8 and 11 rows (passes of 8), k from one 64-column step to 18432 (a 64-column last
// piece; k < a piece), m below the SM count (blocks of one row) and m = 20000, bias,
// accumulate, strided x. The dispatch: LaunchGemv and the Matmul / FusedMatmul "cuda"
// backends send 2-4 rows here by shape, and one row of an accumulating projection (the o
// projection), 1-8 with the mode forced on (Bf16RingMmaLaunches counts it).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "kernels/cuda/common/device_params.h"
#include "kernels/cuda/gemm/fp8_ring_mma.h"
#include "kernels/ops_fused.h"
#include "gemv_test_util.h"
#include "op_test_util.h"

namespace pg::ops::testing {
namespace {

struct Bf16Case {
  int64_t n, k, m;
  bool bias = false, accumulate = false;
  int64_t xpad = 0;
  std::string Name() const {
    return fmt::format("bf16 ring mma n={} k={} m={}{}{}{}", n, k, m, bias ? " bias" : "",
                       accumulate ? " +=" : "", xpad ? " xpad" : "");
  }
};

// One case on the device: x [n, k] (rows k + xpad apart), w [m, k], bias, out (starts as
// out_init), and ref = ref Matmul onto out_init (accumulate) or in its place.
struct Bf16Problem {
  Tensor x, w, bias, out_init, ref;
  std::vector<uint16_t> out_bits;
  std::unique_ptr<Dev> dx, dw, dbias, dout;
  cuda::GemvArgs args{};
  template <typename F>
  std::vector<float> Run(F&& launch) const {
    return RunIntoBf16(*dout, out_bits, launch);
  }};

std::unique_ptr<Bf16Problem> MakeProblem(const Bf16Case& c) {
  auto pr = std::make_unique<Bf16Problem>();
  const int64_t ldx = c.k + c.xpad;
  pr->x = Tensor(DType::kF32, {c.n, c.k});
  pr->w = Tensor(DType::kF32, {c.m, c.k});
  pr->bias = Tensor(DType::kF32, {c.m});
  pr->out_init = Tensor(DType::kF32, {c.n, c.m});
  pr->ref = Tensor(DType::kF32, {c.n, c.m});
  FillNormal(pr->x, 0.2f, 1.0f);
  FillNormal(pr->w, 0.0f, 0.05f);
  FillNormal(pr->bias);
  FillNormal(pr->out_init);
  RoundToBf16(pr->x), RoundToBf16(pr->w), RoundToBf16(pr->out_init);
  Restore(pr->ref, Copy(pr->out_init));
  MatmulParams p{.x = pr->x.view(), .w = pr->w.view(), .out = pr->ref.view()};
  if (c.bias) p.bias = pr->bias.view();
  p.accumulate = c.accumulate;
  RunWith(RefImpl<MatmulParams>(), p);
  const std::vector<uint16_t> xb = Bf16Rows(pr->x.data<float>(), c.n, c.k, ldx);
  const std::vector<uint16_t> wb = Bf16Rows(pr->w.data<float>(), c.m, c.k, c.k);
  pr->out_bits = Bf16Rows(pr->out_init.data<float>(), c.n, c.m, c.m);
  pr->dx = std::make_unique<Dev>(xb.data(), xb.size() * 2);
  pr->dw = std::make_unique<Dev>(wb.data(), wb.size() * 2);
  pr->dbias = std::make_unique<Dev>(pr->bias.data<float>(), size_t(c.m) * 4);
  pr->dout = std::make_unique<Dev>(pr->out_bits.size() * 2);
  cuda::GemvArgs& a = pr->args;
  a.x = static_cast<const cuda::bf16*>(pr->dx->p);
  a.w = static_cast<const cuda::bf16*>(pr->dw->p);
  a.out = static_cast<cuda::bf16*>(pr->dout->p);
  a.bias = c.bias ? static_cast<const float*>(pr->dbias->p) : nullptr;
  a.n = c.n, a.k = c.k, a.m = c.m, a.ldx = ldx, a.ldw = c.k, a.ldo = c.m;
  a.accumulate = c.accumulate;
  a.w_constant = true;
  return pr;
}

std::vector<Bf16Case> Cases() {
  std::vector<Bf16Case> cases;
  for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 8}) {
    cases.push_back({n, 64, 37});
    cases.push_back({n, 576, 129, true});
  }
  for (int64_t n : {2, 5, 8}) {
    cases.push_back({n, 4160, 333, false, true});  // a 64-column last piece
    cases.push_back({n, 4096, 300, true, true, 8});
    cases.push_back({n, 4096, 1024});              // Llama kv at one row a block
  }
  // One row, accumulating (the one-row rule takes the first: Qwen3-30B-A3B's o).
  cases.push_back({1, 4096, 2048, false, true});
  cases.push_back({1, 4096, 4096, false, true});
  cases.push_back({1, 14336, 600, false, true});
  cases.push_back({2, 18432, 200, false, true});  // pieces of 6 KB a row
  cases.push_back({7, 14336, 131, true});
  cases.push_back({11, 2048, 200, true});         // two passes (8 + 3)
  cases.push_back({4, 512, 20000});
  cases.push_back({8, 1024, 5, true, true});
  return cases;
}

TEST(Bf16RingMma, MatchesTheReferenceAndIsLayoutInvariant) {
  PG_SEED_TRACE();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_FAIL() << "no CUDA device";
  const cuda::Fp8GemvVariant saved = cuda::GetFp8GemvVariant();
  struct Layout {
    int piece_kb, depth, stage_x, warps, blocks, fill = 0;  // fill: ring_fill_inflight
  };
  const Layout layouts[] = {{0, 0, 2, 8, 1},  {0, 2, 1, 8, 1},  {6, 0, 0, 8, 1}, {4, 2, 1, 8, 1},
                            {1, 0, 0, 8, 1},  {2, 4, 0, 8, 1},  {0, 0, 2, 8, 2}, {0, 0, 1, 8, 3},
                            {0, 0, 1, 8, 4},  {0, 6, 2, 8, 1},  {0, 0, 2, 16, 1}, {4, 2, 1, 16, 1},
                            {6, 0, 0, 16, 1}, {0, 0, 1, 8, 4, 1}, {2, 4, 0, 8, 1, 2}, {1, 0, 0, 8, 1, 1},
                            {0, 0, 2, 16, 1, -1}};
  for (const Bf16Case& c : Cases()) {
    SCOPED_TRACE(c.Name());
    const auto pr = MakeProblem(c);
    const cuda::GemvArgs& a = pr->args;
    ASSERT_TRUE(cuda::Bf16RingMmaFits(a) || c.n > 8);
    std::vector<float> first[2];  // [16 warps]
    for (const Layout& l : layouts) {
      cuda::Fp8GemvVariant v = saved;
      v.ring_piece_kb = l.piece_kb, v.ring_depth = l.depth, v.ring_stage_x = l.stage_x;
      v.ring_warps = l.warps, v.ring_blocks = l.blocks, v.ring_fill_inflight = l.fill;
      cuda::SetFp8GemvVariant(v);
      const std::string what = fmt::format("piece {} KB depth {} stage x {} warps {} blocks {} fill {} ",
                                           l.piece_kb, l.depth, l.stage_x, l.warps, l.blocks, l.fill);
      // n > 8 (passes of 8): through the kernel's launcher directly, as a Fits-free call.
      const std::vector<float> got = pr->Run([&] { cuda::LaunchBf16RingMma(a, nullptr); });
      ExpectClose(pr->ref.data<float>(), got.data(), pr->ref.numel(), kBf16, what + "vs ref");
      std::vector<float>& f = first[l.warps == 16];
      if (f.empty()) f = got;
      else ExpectExact(f.data(), got.data(), pr->ref.numel(), what + "vs the first layout");
    }
    cuda::SetFp8GemvVariant(saved);
    const cuda::Bf16RingMmaMode mode = cuda::GetBf16RingMmaMode();
    cuda::SetBf16RingMmaMode(cuda::Bf16RingMmaMode::kShape);
    // The one-row rule (Bf16RingMmaFirst): an accumulating row whose block shares fit the ring.
    const bool one_row = c.n == 1 && c.accumulate && cuda::Bf16RingMmaFirst(a);
    if (c.n == 1 && c.accumulate && c.m <= 2048 && c.k <= 4096) {
      EXPECT_TRUE(one_row) << "the one-row rule refuses an o-projection shape";
    }
    if ((c.n < 2 || c.n > 4) && !one_row) {
      cuda::SetBf16RingMmaMode(mode);
      continue;
    }
    // LaunchGemv's dispatch by shape takes it (same bits as the default layout).
    const int64_t before = cuda::Bf16RingMmaLaunches();
    const std::vector<float> got = pr->Run([&] { cuda::LaunchGemv(a, nullptr); });
    EXPECT_EQ(cuda::Bf16RingMmaLaunches(), before + 1) << "LaunchGemv did not take the ring kernel";
    ExpectExact(first[0].data(), got.data(), pr->ref.numel(), "LaunchGemv vs LaunchBf16RingMma");
    cuda::SetBf16RingMmaMode(mode);
  }
}

// The fused options through FusedMatmul's "cuda" backend at 2-8 rows (norm prologue with f32
// and bf16 weights, SwiGLU epilogue, bias) against ref's composition; the backend must have
// run the ring kernel (by shape at 2-4 rows, the mode forced on at 5-8). Tolerances as
// fused_matmul_test.cpp (SwiGLU rounds three times).
TEST(Bf16RingMma, FusedMatchesTheComposition) {
  PG_SEED_TRACE();
  struct FusedCase {
    int64_t n, k, m;  // m: w's rows (2x the outputs with swiglu)
    bool norm, swiglu, bias;
    bool bf16_norm = false;
  };
  std::vector<FusedCase> cases;
  for (int64_t n : {2, 3, 5, 8}) {
    cases.push_back({n, 576, 333, true, false, n == 3});
    cases.push_back({n, 1024, 2 * 130, false, true, true});
    cases.push_back({n, 4096, 2 * 65, true, true, n == 5, n == 8});
  }
  cases.push_back({8, 7168, 256, true, false, true});  // 112 KB staged rows
  const KernelImpl<FusedMatmulParams>* impl = Registry::Global().table<FusedMatmulParams>().Find("cuda");
  ASSERT_NE(impl, nullptr);
  const cuda::Bf16RingMmaMode mode = cuda::GetBf16RingMmaMode();
  for (const FusedCase& c : cases) {
    cuda::SetBf16RingMmaMode(c.n <= 4 ? cuda::Bf16RingMmaMode::kShape : cuda::Bf16RingMmaMode::kOn);
    const std::string name = fmt::format("n={} k={} m={}{}{}{}{}", c.n, c.k, c.m, c.norm ? " norm" : "",
                                         c.bf16_norm ? "(bf16)" : "", c.swiglu ? " swiglu" : "",
                                         c.bias ? " bias" : "");
    SCOPED_TRACE(name);
    Tensor x(DType::kF32, {c.n, c.k}), nw(DType::kF32, {c.k}), bias(DType::kF32, {c.m}), wf(DType::kF32, {c.m, c.k});
    FillNormal(x, 0.3f, 2.0f);  // mean off zero: a missing norm is visible
    FillUniform(nw, 0.5f, 1.5f);
    FillNormal(bias);
    FillNormal(wf, 0.0f, 0.05f);
    RoundToBf16(x);
    Tensor w(DType::kBF16, {c.m, c.k});  // (the device backends take bf16 weights)
    for (int64_t i = 0; i < c.m * c.k; ++i) w.data<uint16_t>()[i] = F32ToBf16(wf.data<float>()[i]);
    if (c.bf16_norm) RoundToBf16(nw);
    const Tensor nw_t = NormWeightOf(nw, c.bf16_norm);
    const int64_t out_m = c.swiglu ? c.m / 2 : c.m;
    Tensor normed(DType::kF32, {c.n, c.k}), projected(DType::kF32, {c.n, c.m});
    const FusedInputs in{x, c.norm ? &nw_t : nullptr, w, c.bias ? &bias : nullptr, nullptr, c.swiglu, normed, projected};
    auto params = [&](const Tensor& out) { return FusedParamsOf(in, out); };
    Tensor ref_out(DType::kF32, {c.n, out_m}), out(DType::kF32, {c.n, out_m});
    RunWith(RefImpl<FusedMatmulParams>(), params(ref_out));
    const int64_t before = cuda::Bf16RingMmaLaunches();
    ASSERT_TRUE(RunBackend(*impl, params(out))) << "cuda refused " << name;
    EXPECT_EQ(cuda::Bf16RingMmaLaunches(), before + 1) << "the fused backend did not run the ring kernel";
    ExpectClose(ref_out.data<float>(), out.data<float>(), out.numel(),
                c.swiglu ? Tolerance{0.08, 1e-4} : kBf16, "cuda " + name);
  }
  cuda::SetBf16RingMmaMode(mode);
}

// Matmul's "cuda" backend: by shape the ring kernel at 2-4 rows where it fits (the warp
// GEMV where it does not: k % 64 != 0) and cuBLASLt at 5-8; forced on (kOn) the ring kernel
// at 5-8 rows too (cuBLASLt beyond 8). Every result against ref.
TEST(Bf16RingMma, MatmulBackendDispatch) {
  PG_SEED_TRACE();
  const KernelImpl<MatmulParams>* impl = Registry::Global().table<MatmulParams>().Find("cuda");
  ASSERT_NE(impl, nullptr);
  const cuda::Bf16RingMmaMode mode = cuda::GetBf16RingMmaMode();
  using Mode = cuda::Bf16RingMmaMode;
  for (const auto& [n, k, m, md, ring] : std::vector<std::tuple<int64_t, int64_t, int64_t, Mode, bool>>{
           {3, 4096, 300, Mode::kShape, true}, {4, 1000, 77, Mode::kShape, false},
           {5, 4096, 300, Mode::kShape, false}, {5, 4096, 300, Mode::kOn, true},
           {8, 1024, 77, Mode::kOn, true}, {6, 1000, 77, Mode::kOn, false}, {9, 1024, 77, Mode::kOn, false}}) {
    SCOPED_TRACE(fmt::format("n={} k={} m={} mode {}", n, k, m, int(md)));
    cuda::SetBf16RingMmaMode(md);
    Tensor x(DType::kF32, {n, k}), w(DType::kF32, {m, k}), ref(DType::kF32, {n, m}), out(DType::kF32, {n, m});
    FillNormal(x), FillNormal(w, 0.0f, 0.05f);
    RoundToBf16(x), RoundToBf16(w);
    Tensor wb(DType::kBF16, {m, k});
    for (int64_t i = 0; i < m * k; ++i) wb.data<uint16_t>()[i] = F32ToBf16(w.data<float>()[i]);
    RunWith(RefImpl<MatmulParams>(), MatmulParams{.x = x.view(), .w = w.view(), .out = ref.view()});
    const int64_t before = cuda::Bf16RingMmaLaunches();
    ASSERT_TRUE(RunBackend(*impl, MatmulParams{.x = x.view(), .w = wb.view(), .out = out.view()}));
    EXPECT_EQ(cuda::Bf16RingMmaLaunches(), before + (ring ? 1 : 0));
    ExpectClose(ref.data<float>(), out.data<float>(), out.numel(), kBf16, "cuda Matmul");
  }
  cuda::SetBf16RingMmaMode(mode);
}

TEST(Bf16RingMma, RefusesWhatItCannotTake) {
  cuda::GemvArgs a{};
  a.x = reinterpret_cast<const cuda::bf16*>(uintptr_t(256));
  a.w = reinterpret_cast<const cuda::bf16*>(uintptr_t(512));
  a.out = reinterpret_cast<cuda::bf16*>(uintptr_t(1024));
  a.n = 4, a.k = 4096, a.m = 64, a.ldx = 4096, a.ldw = 4096, a.ldo = 64;
  a.w_constant = true;
  EXPECT_TRUE(cuda::Bf16RingMmaFits(a));
  a.n = 9;
  EXPECT_FALSE(cuda::Bf16RingMmaFits(a)) << "more than 8 rows";
  a.n = 4, a.k = 4100;
  EXPECT_FALSE(cuda::Bf16RingMmaFits(a)) << "k % 64 != 0";
  a.k = 4096, a.ldw = 4100;
  EXPECT_FALSE(cuda::Bf16RingMmaFits(a)) << "ldw % 8 != 0";
  a.ldw = 4096, a.w += 4;
  EXPECT_FALSE(cuda::Bf16RingMmaFits(a)) << "unaligned w";
  a.w -= 4, a.w_constant = false;
  EXPECT_FALSE(cuda::Bf16RingMmaFits(a)) << "w not constant (streamed before the PDL wait)";
  a.w_constant = true, a.out_f32 = reinterpret_cast<float*>(uintptr_t(2048));
  EXPECT_FALSE(cuda::Bf16RingMmaFits(a)) << "f32 output";
  a.out_f32 = nullptr, a.swiglu = true, a.accumulate = true;
  EXPECT_FALSE(cuda::Bf16RingMmaFits(a)) << "swiglu with accumulate";
  a.accumulate = false;
  EXPECT_TRUE(cuda::Bf16RingMmaFits(a));
  a.norm_weight = &a, a.n = 8, a.k = 16384, a.ldx = a.ldw = 16384;
  EXPECT_FALSE(cuda::Bf16RingMmaFits(a)) << "8 x 16384 normalised rows: more than the staging";
}

}  // namespace
}  // namespace pg::ops::testing
