// The tensor-core prefill kernel called directly (no routing, no decode kernel in the same
// batch): against ref per sequence, for both tile heights (64 / 128 packed rows) and forced
// split counts, and bitwise run-to-run determinism (a race shows up as a difference).
// CUDA builds on a machine with a GPU only; elsewhere the test is skipped with its reason.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>

#include "op_test_util.h"

#if defined(PEREGRINE_HAVE_CUDA)
#include <cuda_runtime.h>

#include "kernels/cuda/attention/prefill_attention.h"
#include "kernels/cuda/batch_plan.h"
#include "kernels/cuda/common/context.h"
#endif

namespace pg::ops::testing {
namespace {

#if defined(PEREGRINE_HAVE_CUDA)

struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) { PG_TEST_CUDA(cudaMalloc(&p, bytes)); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

std::vector<uint16_t> ToBf16(const Tensor& t) {
  std::vector<uint16_t> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = F32ToBf16(t.data<float>()[i]);
  return v;
}

int ComputeMajor() {
  int dev = 0, major = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  return major;
}

struct KernelCase {
  int heads, kv_heads, head_dim, page_size;
  std::vector<std::pair<int, int>> seqs;  // (q_len, kv_len); q_len 1 rows are not the kernel's
  int window = 0;
  float softcap = 0;
};

// Diagnostics for a failing kernel (prints nothing when every element is within
// kBf16Attention's max_rel): where the elements off by more than max_rel * output rms sit, by
// token % 16, head and 8-wide column chunk (a wrong fragment / descriptor layout shows up as a
// pattern), and the first one.
void DumpMismatchPattern(const float* ref, const float* got, int q_len, int heads, int d,
                         const std::string& what) {
  double ss = 0;
  const int64_t n = int64_t(q_len) * heads * d;
  for (int64_t i = 0; i < n; ++i) ss += double(ref[i]) * ref[i];
  const double tol = kBf16Attention.max_rel * std::sqrt(ss / double(n));
  std::vector<int64_t> by_tok(16), by_head(static_cast<size_t>(heads)), by_chunk(static_cast<size_t>(d / 8));
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (std::fabs(double(got[i]) - double(ref[i])) <= tol) continue;
    if (bad++ == 0) first = i;
    const int64_t tok = i / (int64_t(heads) * d), h = (i / d) % heads, col = i % d;
    ++by_tok[size_t(tok % 16)], ++by_head[size_t(h)], ++by_chunk[size_t(col / 8)];
  }
  if (bad == 0) return;
  auto join = [](const std::vector<int64_t>& v) {
    std::string r;
    for (int64_t x : v) r += fmt::format("{} ", x);
    return r;
  };
  fmt::print("MISMATCH {}: {} of {} elements; first at token {} head {} col {} (ref {} got {})\n"
             "  by token%16: {}\n  by head: {}\n  by 8-col chunk: {}\n",
             what, bad, n, first / (int64_t(heads) * d), (first / d) % heads, first % d, ref[first],
             got[first], join(by_tok), join(by_head), join(by_chunk));
}

TEST(PrefillAttentionKernel, AloneMatchesReferenceAndIsDeterministic) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  PG_SEED_TRACE();
  const std::vector<KernelCase> cases = {
      {16, 4, 128, 16, {{90, 400}, {1, 33}, {45, 45}}, 100},
      {8, 2, 128, 16, {{64, 3000}, {1, 2000}, {7, 2500}}},
      {16, 2, 64, 16, {{1, 300}, {200, 200}, {37, 102}, {2, 130}, {113, 613}, {1, 1}, {64, 64}, {65, 70}}},
      {32, 8, 128, 16, {{200, 200}, {45, 45}}},
      {8, 8, 128, 7, {{129, 129}, {3, 9}}, 0, 30.0f},
      {8, 2, 128, 16, {{700, 700}, {300, 2300}, {2, 17}}},  // many 128 x 128 tiles (wgmma)
  };
  for (const KernelCase& c : cases) {
    std::string name = fmt::format("{}:{} d={} window={}", c.heads, c.kv_heads, c.head_dim, c.window);
    for (auto [q, k] : c.seqs) name += fmt::format(" ({},{})", q, k);
    SCOPED_TRACE(name);
    std::vector<int32_t> q_start, q_len, kv_len, page_start, page_table;
    int32_t rows = 0, pages = 0;
    for (auto [ql, kl] : c.seqs) {
      q_start.push_back(rows), q_len.push_back(ql), kv_len.push_back(kl), page_start.push_back(pages);
      rows += ql;
      pages += (kl + c.page_size - 1) / c.page_size;
    }
    std::vector<int32_t> perm(size_t(pages + 1));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), Rng());
    page_table.assign(perm.begin(), perm.begin() + pages);
    AttentionBatch batch{int(c.seqs.size()), c.page_size, q_start, q_len, kv_len, page_start, page_table};
    const int64_t num_pages = pages + 1, d = c.head_dim;
    Tensor qt(DType::kF32, {rows, c.heads, d}), ref(DType::kF32, {rows, c.heads, d});
    Tensor kc(DType::kF32, {num_pages, c.page_size, c.kv_heads, d});
    Tensor vc(DType::kF32, {num_pages, c.page_size, c.kv_heads, d});
    FillNormal(qt), FillNormal(kc), FillNormal(vc);
    for (const Tensor* t : {&qt, &kc, &vc}) RoundToBf16(*t);
    RunWith(RefImpl<AttentionParams>(),
            AttentionParams{qt.view(), ref.view(), {kc.view(), vc.view()}, &batch, 0.0f, c.window, c.softcap});

    const size_t q_elems = size_t(qt.numel()), c_elems = size_t(kc.numel());
    DevBuf dq(q_elems * 2), dout(q_elems * 2), dk(c_elems * 2), dv(c_elems * 2);
    PG_TEST_CUDA(cudaMemcpy(dq.p, ToBf16(qt).data(), q_elems * 2, cudaMemcpyHostToDevice));
    PG_TEST_CUDA(cudaMemcpy(dk.p, ToBf16(kc).data(), c_elems * 2, cudaMemcpyHostToDevice));
    PG_TEST_CUDA(cudaMemcpy(dv.p, ToBf16(vc).data(), c_elems * 2, cudaMemcpyHostToDevice));
    cuda::DeviceBatchPlan plan;
    plan.Upload(batch, 0);
    const size_t max_splits = 64;
    DevBuf ws(q_elems * max_splits * 4 + size_t(rows) * c.heads * max_splits * 8);

    // Kernels: 64-row and 128-row mma.sync tiles (wgmma not allowed), and the wgmma kernel
    // allowed (taken for head_dim 128 on sm_90, whatever block_m).
    for (const int variant : {0, 1, 2})
      for (const int force : {0, 1, 3}) {
        const int block_m = variant == 1 ? 128 : 64;  // variant 2 asks 64: the plan overrides
        cuda::PrefillAttentionArgs a{};
        a.q = static_cast<cuda::bf16*>(dq.p), a.out = static_cast<cuda::bf16*>(dout.p);
        a.k_cache = dk.p, a.v_cache = dv.p, a.kv_fp8 = false;
        a.batch = plan.view();
        a.q_stride = a.out_stride = int64_t(c.heads) * d;
        a.heads = c.heads, a.kv_heads = c.kv_heads, a.head_dim = c.head_dim;
        a.min_q_len = 2, a.block_m = block_m, a.allow_wgmma = variant == 2;
        a.logit_scale = 1.0f / std::sqrt(float(d)), a.v_scale = 1.0f;
        a.softcap = c.softcap, a.sliding_window = c.window;
        cuda::PlanPrefillAttention(a, q_len.data(), kv_len.data(), int(c.seqs.size()), force);
        SCOPED_TRACE(fmt::format("block_m {} force_splits {} kernel {}", block_m, force,
                                 a.wgmma ? "wgmma" : "mma.sync"));
        const char* wgmma_env = std::getenv("PEREGRINE_PREFILL_WGMMA");
        if (variant == 2 && c.head_dim == 128 && ComputeMajor() == 9 &&
            (wgmma_env == nullptr || wgmma_env[0] != '0')) {
          EXPECT_TRUE(a.wgmma) << "the wgmma kernel was not selected";
        }
        ASSERT_LE(size_t(a.num_splits), max_splits);
        a.partial_acc = static_cast<float*>(ws.p);
        a.partial_ml = a.partial_acc + size_t(rows) * c.heads * size_t(a.num_splits) * size_t(d);
        std::vector<std::vector<uint16_t>> runs;
        for (int rep = 0; rep < 2; ++rep) {
          PG_TEST_CUDA(cudaMemset(dout.p, 0xff, q_elems * 2));  // bf16 NaN
          cuda::LaunchPrefillAttention(a, 0);
          PG_TEST_CUDA(cudaGetLastError());
          PG_TEST_CUDA(cudaDeviceSynchronize());
          runs.emplace_back(q_elems);
          PG_TEST_CUDA(cudaMemcpy(runs.back().data(), dout.p, q_elems * 2, cudaMemcpyDeviceToHost));
        }
        EXPECT_TRUE(runs[0] == runs[1]) << "two runs differ (splits " << a.num_splits << ")";
        for (size_t s = 0; s < c.seqs.size(); ++s) {
          if (q_len[s] < 2) continue;
          const int64_t n = int64_t(q_len[s]) * c.heads * d, off = int64_t(q_start[s]) * c.heads * d;
          std::vector<float> got(static_cast<size_t>(n), 0.0f);
          for (int64_t i = 0; i < n; ++i) got[size_t(i)] = Bf16ToF32(runs[0][size_t(off + i)]);
          const std::string what = fmt::format("seq {} (splits {}, tiles {})", s, a.num_splits, a.num_tiles);
          ExpectClose(ref.data<float>() + off, got.data(), n, kBf16Attention, what);
          DumpMismatchPattern(ref.data<float>() + off, got.data(), q_len[s], c.heads, c.head_dim, what);
        }
      }
  }
}

#endif  // (the kernel-alone test exists in CUDA builds only: nothing to skip elsewhere)

}  // namespace
}  // namespace pg::ops::testing
