// Dispatch behaviour of the kernel registry: capability then priority, device filtering,
// errors for shape mismatches and for missing or incapable implementations.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/registry.h"

namespace pg::ops {
namespace {

struct AddFixture {
  Tensor a, b, out;
  explicit AddFixture(int64_t n) : a(DType::kF32, {n}), b(DType::kF32, {n}), out(DType::kF32, {n}) {
    for (int64_t i = 0; i < n; ++i) a.data<float>()[i] = float(i) + 0.5f, b.data<float>()[i] = 2.0f;
  }
  AddParams params() const { return {a.view(), b.view(), out.view()}; }
};

Registry MakeRegistry(std::vector<std::string>* log) {
  Registry r;
  auto record = [log](const char* name) {
    return [log, name](const AddParams&) { log->push_back(name); };
  };
  r.Register(KernelImpl<AddParams>{"low", Device::kCpu, 1, {}, record("low")});
  r.Register(KernelImpl<AddParams>{"high_big_only", Device::kCpu, 5,
                                   [](const AddParams& p) { return p.out.numel() > 10; },
                                   record("high_big_only")});
  r.Register(KernelImpl<AddParams>{"cuda_only", Device::kCuda, 100, {}, record("cuda_only")});
  r.Register(KernelImpl<AddParams>{"mid", Device::kCpu, 3,
                                   [](const AddParams& p) { return p.out.numel() % 2 == 1; },
                                   record("mid")});
  return r;
}

TEST(Registry, HighestCapablePriorityWinsOnTheTensorsDevice) {
  std::vector<std::string> log;
  Registry r = MakeRegistry(&log);
  r.Run(AddFixture(4).params());   // only "low" capable on cpu
  r.Run(AddFixture(7).params());   // "mid" (3) beats "low" (1)
  r.Run(AddFixture(20).params());  // "high_big_only" (5)
  r.Run(AddFixture(21).params());  // "high_big_only" (5) beats "mid" (3)
  EXPECT_EQ(log, (std::vector<std::string>{"low", "mid", "high_big_only", "high_big_only"}));
  EXPECT_EQ(r.Selected(AddFixture(7).params())->backend, "mid");
  EXPECT_EQ(r.table<AddParams>().all().size(), 4u);
}

TEST(Registry, NoCapableImplementationIsUnsupported) {
  Registry r;
  try {
    r.Run(AddFixture(4).params());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("Add"), std::string::npos);
  }
}

TEST(Registry, ForcingAnIncapableImplementationThrows) {
  std::vector<std::string> log;
  Registry r = MakeRegistry(&log);
  const auto* big = r.table<AddParams>().Find("high_big_only");
  ASSERT_NE(big, nullptr);
  EXPECT_THROW(RunWith(*big, AddFixture(4).params()), Error);
  const auto* cuda = r.table<AddParams>().Find("cuda_only");
  EXPECT_THROW(RunWith(*cuda, AddFixture(20).params()), Error);
  RunWith(*big, AddFixture(20).params());
  EXPECT_EQ(log, std::vector<std::string>{"high_big_only"});
}

TEST(Registry, ShapeMismatchThrowsBeforeAnyKernelRuns) {
  std::vector<std::string> log;
  Registry r = MakeRegistry(&log);
  Tensor a(DType::kF32, {4, 3}), b(DType::kF32, {3, 4}), out(DType::kF32, {4, 3});
  try {
    r.Run(AddParams{a.view(), b.view(), out.view()});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("[3, 4] f32"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(log.empty());
}

// The thread's op observer sees each dispatched op (Begin / End around its kernel) and can
// leave an op out entirely (bench gpu-decode --skip-op): the kernel does not run, Begin / End
// are not called for it, other ops run as before; validation still comes first.
TEST(Registry, ObserverSeesOpsAndCanSkipThem) {
  struct Recorder final : OpObserver {
    std::vector<std::string> seen;
    bool skip_add = false;
    void Begin(std::string_view op) override { seen.push_back("begin " + std::string(op)); }
    void End(std::string_view op) override { seen.push_back("end " + std::string(op)); }
    bool Skip(std::string_view op) override { return skip_add && op == "Add"; }
  };
  std::vector<std::string> log;
  Registry r = MakeRegistry(&log);
  Recorder rec;
  OpObserver* prev = CurrentOpObserver();
  CurrentOpObserver() = &rec;
  r.Run(AddFixture(4).params());
  rec.skip_add = true;
  r.Run(AddFixture(4).params());  // left out
  Tensor a(DType::kF32, {4, 3}), b(DType::kF32, {3, 4}), out(DType::kF32, {4, 3});
  EXPECT_THROW(r.Run(AddParams{a.view(), b.view(), out.view()}), Error);  // validated first
  CurrentOpObserver() = prev;
  EXPECT_EQ(log, std::vector<std::string>{"low"});
  EXPECT_EQ(rec.seen, (std::vector<std::string>{"begin Add", "end Add"}));
}

TEST(Registry, GlobalHasReferenceForEveryOpAndPicksFastCpuKernels) {
  const Registry& g = Registry::Global();
  EXPECT_NE(g.table<EmbeddingParams>().Find("ref"), nullptr);
  EXPECT_NE(g.table<RmsNormParams>().Find("ref"), nullptr);
  EXPECT_NE(g.table<RopeParams>().Find("ref"), nullptr);
  EXPECT_NE(g.table<MatmulParams>().Find("ref"), nullptr);
  EXPECT_NE(g.table<SwiGluParams>().Find("ref"), nullptr);
  EXPECT_NE(g.table<AddParams>().Find("ref"), nullptr);
  EXPECT_NE(g.table<KvWriteParams>().Find("ref"), nullptr);
  EXPECT_NE(g.table<AttentionParams>().Find("ref"), nullptr);

  const auto& f = cpu::Features();
  Tensor x1(DType::kF32, {1, 64}), x64(DType::kF32, {64, 64});
  Tensor w(DType::kQ4_1, {8, 64}), o1(DType::kF32, {1, 8}), o64(DType::kF32, {64, 8});
  const auto* decode = g.Selected(MatmulParams{x1.view(), w.view(), o1.view(), {}, {}, false});
  const auto* prefill = g.Selected(MatmulParams{x64.view(), w.view(), o64.view(), {}, {}, false});
  ASSERT_NE(decode, nullptr);
  ASSERT_NE(prefill, nullptr);
  // Batch invariance (docs/design/engine.md): decode and prefill run the same row kernel;
  // OpenBLAS only serves CPUs without AVX2.
  if (f.vnni) {
    EXPECT_EQ(decode->backend, "cpu_vnni_q8");
  } else if (f.avx2) {
    EXPECT_EQ(decode->backend, "cpu_avx2_q8");
  } else {
    EXPECT_EQ(decode->backend, "cpu_blas");
  }
  EXPECT_EQ(prefill->backend, decode->backend);
}

}  // namespace
}  // namespace pg::ops
