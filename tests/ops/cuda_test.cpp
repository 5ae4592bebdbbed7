// CUDA-only checks beyond the shared harness: the device batch plan (what the runtime and
// CUDA graphs use) against the kernels' own upload and against ref on long split-K decode
// histories; the runtime's graph capture (a replay recomputes on new inputs); the device
// arena and memory budget; the cuBLASLt algorithm cache. Built only with PEREGRINE_CUDA.
#include <fmt/format.h>

#include <numeric>

#include "kernels/cuda/batch_plan.h"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/gemm/matmul_lt.h"
#include "op_test_util.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/cuda/stream.h"

namespace pg::ops::testing {
namespace {

namespace rt = pg::runtime::cuda;

const KernelImpl<AttentionParams>* CudaAttention() {
  return Registry::Global().table<AttentionParams>().Find("cuda");
}

TEST(CudaBackend, KernelsAreRegistered) {
  // This binary runs on the GPU machine: a missing device is a failure, not a skip.
  ASSERT_GT(cuda::DeviceCount(), 0) << "no CUDA device visible";
  EXPECT_NE(CudaAttention(), nullptr);
  EXPECT_NE(Registry::Global().table<MatmulParams>().Find("cuda"), nullptr);
}

// Llama-3-8B attention geometry: 32 query heads over 8 kv heads, head_dim 128, page 16.
TEST(CudaAttention, LongDecodeAndChunkedPrefillWithDevicePlan) {
  PG_SEED_TRACE();
  const KernelImpl<AttentionParams>* k = CudaAttention();
  ASSERT_NE(k, nullptr);
  const int heads = 32, kv_heads = 8, d = 128, page = 16;
  // (q_len, kv_len): a decode batch with long histories (few rows: split-K engages), and a
  // prefill chunk on a cached prefix beside a decode (many rows: one split).
  for (const std::vector<std::pair<int, int>>& seqs :
       {std::vector<std::pair<int, int>>{{1, 4099}, {1, 1}, {1, 777}, {1, 2048}},
        std::vector<std::pair<int, int>>{{50, 300}, {1, 1000}}}) {
  SCOPED_TRACE(fmt::format("{} seqs", seqs.size()));
  std::vector<int32_t> q_start, q_len, kv_len, page_start, page_table;
  int32_t q = 0, pages = 0;
  for (auto [ql, kl] : seqs) {
    q_start.push_back(q), q_len.push_back(ql), kv_len.push_back(kl), page_start.push_back(pages);
    q += ql;
    pages += (kl + page - 1) / page;
  }
  std::vector<int32_t> perm(size_t(pages + 5));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), Rng());
  page_table.assign(perm.begin(), perm.begin() + pages);
  AttentionBatch batch{int(seqs.size()), page, q_start, q_len, kv_len, page_start, page_table};
  Tensor qt(DType::kF32, {q, heads, d}), out_ref(DType::kF32, {q, heads, d});
  Tensor kc(DType::kF32, {pages + 5, page, kv_heads, d}), vc(DType::kF32, {pages + 5, page, kv_heads, d});
  FillNormal(qt);
  FillNormal(kc);
  FillNormal(vc);
  for (const Tensor* t : {&qt, &kc, &vc}) RoundToBf16(*t);  // the device sees the same inputs
  AttentionParams p{qt.view(), out_ref.view(), {kc.view(), vc.view()}, &batch};
  RunWith(RefImpl<AttentionParams>(), p);

  // 1) the kernels' own upload of the host spans
  Tensor out_a(DType::kF32, {q, heads, d});
  p.out = out_a.view();
  ASSERT_TRUE(RunBackend(*k, p));
  ExpectClose(out_ref.data<float>(), out_a.data<float>(), out_a.numel(), kBf16Attention, "upload");

  // 2) a DeviceBatchPlan, as the runtime passes it
  Tensor out_b(DType::kF32, {q, heads, d});
  p.out = out_b.view();
  cuda::DeviceBatchPlan plan;
  plan.Upload(batch, cuda::CurrentStream());
  AttentionBatch with_plan = batch;
  with_plan.device = &plan.view();
  DeviceMirror m;
  AttentionParams dp = Mirror(m, p);
  dp.batch = &with_plan;
  RunWith(*k, dp);
  m.CopyBack();
  ExpectExact(out_a.data<float>(), out_b.data<float>(), out_b.numel(), "plan vs upload");
  }
}

// A captured graph of RmsNorm -> Matmul -> Add, replayed on new inputs written into the same
// buffers, gives the reference's result for the new inputs.
TEST(CudaRuntime, GraphReplayRecomputesOnNewInputs) {
  PG_SEED_TRACE();
  const int64_t rows = 19, hidden = 576, m = 333;
  rt::Stream stream;
  rt::DeviceArena arena(size_t(64) << 20);
  auto dev = [&](int64_t r, int64_t c) {
    return TensorView::Contiguous(arena.Allocate(size_t(r * c * 2)), DType::kBF16, {r, c},
                                  Device::kCuda);
  };
  TensorView x = dev(rows, hidden), h = dev(rows, hidden), w = dev(m, hidden), y = dev(rows, m),
             skip = dev(rows, m), z = dev(rows, m);
  TensorView norm_w = TensorView::Contiguous(arena.Allocate(size_t(hidden * 4)), DType::kF32,
                                             {hidden}, Device::kCuda);
  auto upload = [&](const TensorView& dst, const Tensor& src) {  // f32 host -> bf16 device
    std::vector<uint16_t> tmp(size_t(src.numel()));
    for (int64_t i = 0; i < src.numel(); ++i) tmp[size_t(i)] = F32ToBf16(src.data<float>()[i]);
    ASSERT_EQ(cudaMemcpy(dst.data, tmp.data(), tmp.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  };
  Tensor xh(DType::kF32, {rows, hidden}), wh(DType::kF32, {m, hidden}), sh(DType::kF32, {rows, m}),
      nh(DType::kF32, {hidden});
  FillNormal(wh, 0.0f, 0.05f);
  FillNormal(sh);
  FillNormal(nh, 1.0f, 0.1f);
  for (const Tensor* t : {&wh, &sh}) RoundToBf16(*t);
  upload(w, wh);
  upload(skip, sh);
  ASSERT_EQ(cudaMemcpy(norm_w.data, nh.data<float>(), size_t(hidden * 4), cudaMemcpyHostToDevice), cudaSuccess);
  auto step = [&] {
    RmsNorm({x, norm_w, h, {}, 1e-5f});
    Matmul({h, w, y, {}, {}, false});
    Add({y, skip, z});
  };
  // Warm up eagerly on the stream (scratch, cuBLASLt plans), then capture.
  FillNormal(xh);
  RoundToBf16(xh);
  upload(x, xh);
  {
    cuda::StreamScope scope(stream.get());
    step();
  }
  stream.Synchronize();
  rt::CudaGraph graph;
  graph.Capture(stream.get(), step);
  ASSERT_TRUE(graph.captured());
  for (int round = 0; round < 2; ++round) {
    FillNormal(xh);  // new input, same buffer
    RoundToBf16(xh);
    upload(x, xh);
    graph.Replay(stream.get());
    stream.Synchronize();
    // Reference on the CPU for this input.
    Tensor hr(DType::kF32, {rows, hidden}), yr(DType::kF32, {rows, m}), zr(DType::kF32, {rows, m});
    Tensor wq(DType::kBF16, {m, hidden});
    for (int64_t i = 0; i < wh.numel(); ++i) wq.data<uint16_t>()[i] = F32ToBf16(wh.data<float>()[i]);
    RunWith(RefImpl<RmsNormParams>(), RmsNormParams{xh.view(), nh.view(), hr.view(), {}, 1e-5f});
    RunWith(RefImpl<MatmulParams>(), MatmulParams{hr.view(), wq.view(), yr.view(), {}, {}, false});
    RunWith(RefImpl<AddParams>(), AddParams{yr.view(), sh.view(), zr.view()});
    std::vector<uint16_t> got(size_t(rows * m));
    ASSERT_EQ(cudaMemcpy(got.data(), z.data, got.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    std::vector<float> gotf(got.size());
    for (size_t i = 0; i < got.size(); ++i) gotf[i] = Bf16ToF32(got[i]);
    ExpectClose(zr.data<float>(), gotf.data(), zr.numel(), kBf16, fmt::format("replay {}", round));
  }
  rt::DecodeGraphs graphs;
  const int sizes[] = {1, 4, 8};
  int captured = 0;
  graphs.CaptureAll(stream.get(), sizes, [&](int) { step(), ++captured; });
  EXPECT_EQ(captured, 3);
  EXPECT_EQ(graphs.PaddedSize(3), 4);
  EXPECT_EQ(graphs.PaddedSize(8), 8);
  EXPECT_EQ(graphs.PaddedSize(9), 0);
}

TEST(CudaRuntime, ArenaAndBudget) {
  rt::DeviceArena arena(1 << 20);
  void* a = arena.Allocate(1000);
  void* b = arena.Allocate(10, 256);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 256, 0u);
  EXPECT_GE(static_cast<char*>(b) - static_cast<char*>(a), 1000);
  try {
    arena.Allocate(size_t(2) << 20);
    FAIL() << "expected kResourceExhausted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
  }
  EXPECT_THROW(rt::PlanDeviceMemory(0.0), Error);
  EXPECT_THROW(rt::PlanDeviceMemory(1.5), Error);
  const rt::DeviceMemoryBudget budget = rt::PlanDeviceMemory(0.9);
  EXPECT_GT(budget.total_bytes, 0u);
  EXPECT_LE(budget.arena_bytes, budget.free_bytes);
  EXPECT_GT(budget.arena_bytes, budget.total_bytes / 2) << "an idle GPU should allow most of 90%";
}

// A realistic GEMM through the registry twice: the second call reuses the cached plan.
TEST(CudaMatmul, LargeShapeAndAlgorithmCache) {
  PG_SEED_TRACE();
  const KernelImpl<MatmulParams>* k = Registry::Global().table<MatmulParams>().Find("cuda");
  ASSERT_NE(k, nullptr);
  for (int64_t n : {1, 3, 8, 77}) {
    const int64_t kk = 4096, m = 1000;
    Tensor x(DType::kF32, {n, kk}), wf(DType::kF32, {m, kk}), w(DType::kBF16, {m, kk});
    FillNormal(x);
    FillNormal(wf, 0.0f, 0.02f);
    for (int64_t i = 0; i < w.numel(); ++i) w.data<uint16_t>()[i] = F32ToBf16(wf.data<float>()[i]);
    RoundToBf16(x);
    Tensor ref(DType::kF32, {n, m}), out(DType::kF32, {n, m});
    MatmulParams p{x.view(), w.view(), ref.view(), {}, {}, false};
    RunWith(RefImpl<MatmulParams>(), p);
    p.out = out.view();
    ASSERT_TRUE(RunBackend(*k, p));
    ExpectClose(ref.data<float>(), out.data<float>(), out.numel(), kBf16, fmt::format("n={}", n));
    const size_t shapes = cuda::LtCachedShapes();
    ASSERT_TRUE(RunBackend(*k, p));
    EXPECT_EQ(cuda::LtCachedShapes(), shapes) << "n=" << n;
  }
}

// bf16 x and w with an f32 output (MoE router logits): the GEMV at any n, without the bf16
// rounding of the output (held to a tolerance far below bf16's 2^-9 relative step).
TEST(CudaMatmul, F32OutputKeepsPrecision) {
  PG_SEED_TRACE();
  const KernelImpl<MatmulParams>* k = Registry::Global().table<MatmulParams>().Find("cuda");
  ASSERT_NE(k, nullptr);
  for (int64_t n : {1, 5, 37}) {
    const int64_t kk = 2048, m = 129;
    Tensor x(DType::kF32, {n, kk}), wf(DType::kF32, {m, kk}), w(DType::kBF16, {m, kk});
    FillNormal(x);
    FillNormal(wf, 0.0f, 0.02f);
    for (int64_t i = 0; i < w.numel(); ++i) w.data<uint16_t>()[i] = F32ToBf16(wf.data<float>()[i]);
    RoundToBf16(x);
    Tensor ref(DType::kF32, {n, m});
    RunWith(RefImpl<MatmulParams>(), MatmulParams{x.view(), w.view(), ref.view(), {}, {}, false});
    rt::DeviceBuffer dx(size_t(n * kk * 2)), dw(size_t(m * kk * 2)), dout(size_t(n * m * 4));
    std::vector<uint16_t> xb(static_cast<size_t>(n * kk));
    for (size_t i = 0; i < xb.size(); ++i) xb[i] = F32ToBf16(x.data<float>()[i]);
    ASSERT_EQ(cudaMemcpy(dx.data(), xb.data(), xb.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dw.data(), w.data<uint16_t>(), size_t(m * kk * 2), cudaMemcpyHostToDevice),
              cudaSuccess);
    MatmulParams p{TensorView::Contiguous(dx.data(), DType::kBF16, {n, kk}, Device::kCuda),
                   TensorView::Contiguous(dw.data(), DType::kBF16, {m, kk}, Device::kCuda),
                   TensorView::Contiguous(dout.data(), DType::kF32, {n, m}, Device::kCuda),
                   {}, {}, false};
    EXPECT_EQ(Registry::Global().Selected(p), k);
    Matmul(p);
    std::vector<float> out(static_cast<size_t>(n * m));
    ASSERT_EQ(cudaMemcpy(out.data(), dout.data(), out.size() * 4, cudaMemcpyDeviceToHost),
              cudaSuccess);
    double max_rel = 0;
    for (size_t i = 0; i < out.size(); ++i)
      max_rel = std::max(max_rel, std::fabs(double(out[i]) - double(ref.data<float>()[i])) /
                                      (std::fabs(double(ref.data<float>()[i])) + 1e-2));
    EXPECT_LT(max_rel, 2e-4) << "n=" << n;  // bf16 output rounding alone would be ~2e-3
  }
}

}  // namespace
}  // namespace pg::ops::testing
