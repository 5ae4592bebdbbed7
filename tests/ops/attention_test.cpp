// Paged attention: every backend against ref/ on mixed batches (decode, prefill with a
// cached prefix not aligned to pages, plain prefill), GQA 8:2 and 9:3, head_dim 64 and 80,
// page sizes 16 and 7, sliding window, softcap, a 989-token prefill.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "op_test_util.h"

namespace pg::ops::testing {
namespace {

// Relative to rms(ref): online softmax in f32 with a vectorised exp vs double reference.
constexpr Tolerance kAttention{1e-4, 1e-9};

struct Case {
  int heads, kv_heads, head_dim, page_size;
  std::vector<std::pair<int, int>> seqs;  // (q_len, kv_len)
  int window = 0;
  float softcap = 0, scale = 0;
  std::string Name() const {
    return fmt::format("{}:{} d={} page={} seqs={} window={} softcap={} scale={}", heads, kv_heads,
                       head_dim, page_size, seqs.size(), window, softcap, scale);
  }
};

std::vector<Case> Cases() {
  const std::vector<std::pair<int, int>> mixed = {{1, 100}, {37, 50}, {19, 19}, {1, 1}, {3, 40}};
  return {
      {8, 2, 64, 16, mixed},
      {9, 3, 80, 7, mixed},
      {9, 3, 80, 7, mixed, 13, 30.0f},
      {8, 2, 80, 16, mixed, 5, 0.0f, 0.05f},
      {8, 8, 64, 7, {{19, 19}, {1, 77}}, 0, 20.0f},
      {9, 3, 64, 16, {{989, 989}}},
      {8, 2, 64, 7, {{1, 700}, {1, 31}, {1, 64}}, 100},  // decode batch, long history
  };
}

TEST(AttentionOp, EveryBackendMatchesReference) {
  PG_SEED_TRACE();
  Coverage cov;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.Name());
    std::vector<int32_t> q_start, q_len, kv_len, page_start, page_table;
    int32_t q = 0, pages = 0;
    for (auto [ql, kl] : c.seqs) {
      q_start.push_back(q);
      q_len.push_back(ql);
      kv_len.push_back(kl);
      page_start.push_back(pages);
      q += ql;
      pages += (kl + c.page_size - 1) / c.page_size;
    }
    const int64_t num_pages = pages + 2;
    std::vector<int32_t> perm(static_cast<size_t>(num_pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), Rng());
    page_table.assign(perm.begin(), perm.begin() + pages);
    AttentionBatch batch{int(c.seqs.size()), c.page_size, q_start, q_len, kv_len, page_start, page_table};

    Tensor qt(DType::kF32, {q, c.heads, c.head_dim});
    Tensor kc(DType::kF32, {num_pages, c.page_size, c.kv_heads, c.head_dim});
    Tensor vc(DType::kF32, {num_pages, c.page_size, c.kv_heads, c.head_dim});
    FillNormal(qt);
    FillNormal(kc);
    FillNormal(vc);
    // bf16-representable inputs: a bf16 device sees exactly ref's inputs.
    for (const Tensor* t : {&qt, &kc, &vc}) RoundToBf16(*t);
    Tensor ref_out(DType::kF32, {q, c.heads, c.head_dim});
    AttentionParams p{qt.view(), ref_out.view(), {kc.view(), vc.view()}, &batch, c.scale,
                      c.window, c.softcap};
    RunWith(RefImpl<AttentionParams>(), p);
    for (const auto* k : Backends<AttentionParams>()) {
      Tensor out(DType::kF32, {q, c.heads, c.head_dim});
      p.out = out.view();
      if (!RunBackend(*k, p)) continue;
      cov.Ran(k->backend);
      ExpectClose(ref_out.data<float>(), out.data<float>(), out.numel(),
                  OnDevice(*k) ? kBf16Attention : kAttention, k->backend);
    }
  }
  cov.Check<AttentionParams>();
}

// Independent oracle for the reference itself: one query over one key attends with weight 1,
// so the output is that key's value row exactly; two equal keys average their values.
TEST(AttentionOp, ReferenceOnTrivialHistories) {
  const int32_t zero = 0, one = 1, two = 2;
  std::vector<int32_t> pt = {1, 0};
  AttentionBatch b1{1, 4, {&zero, 1}, {&one, 1}, {&one, 1}, {&zero, 1}, pt};
  Tensor qt(DType::kF32, {1, 4, 8}), out(DType::kF32, {1, 4, 8});
  Tensor kc(DType::kF32, {2, 4, 2, 8}), vc(DType::kF32, {2, 4, 2, 8});
  FillNormal(qt);
  FillNormal(kc);
  FillNormal(vc);
  Attention({qt.view(), out.view(), {kc.view(), vc.view()}, &b1});
  for (int h = 0; h < 4; ++h)
    for (int e = 0; e < 8; ++e)  // page 1, slot 0, kv head h / 2
      EXPECT_NEAR(out.data<float>()[h * 8 + e], vc.data<float>()[((1 * 4 + 0) * 2 + h / 2) * 8 + e], 1e-6);
  AttentionBatch b2{1, 4, {&zero, 1}, {&one, 1}, {&two, 1}, {&zero, 1}, pt};
  for (int e = 0; e < 16; ++e) kc.data<float>()[(1 * 4 + 1) * 16 + e] = kc.data<float>()[(1 * 4 + 0) * 16 + e];
  Attention({qt.view(), out.view(), {kc.view(), vc.view()}, &b2});
  for (int h = 0; h < 4; ++h)
    for (int e = 0; e < 8; ++e) {
      float v0 = vc.data<float>()[((1 * 4 + 0) * 2 + h / 2) * 8 + e];
      float v1 = vc.data<float>()[((1 * 4 + 1) * 2 + h / 2) * 8 + e];
      EXPECT_NEAR(out.data<float>()[h * 8 + e], 0.5f * (v0 + v1), 1e-5);
    }
}

TEST(AttentionOp, BadBatchThrows) {
  const int32_t zero = 0, one = 1, five = 5;
  std::vector<int32_t> pt = {7};  // page 7 of a 2-page cache
  AttentionBatch b{1, 4, {&zero, 1}, {&one, 1}, {&five, 1}, {&zero, 1}, pt};
  Tensor qt(DType::kF32, {1, 4, 8}), out(DType::kF32, {1, 4, 8});
  Tensor kc(DType::kF32, {2, 4, 2, 8}), vc(DType::kF32, {2, 4, 2, 8});
  EXPECT_THROW(Attention({qt.view(), out.view(), {kc.view(), vc.view()}, &b}), Error);
  std::vector<int32_t> pt2 = {0, 1};
  AttentionBatch b2{1, 4, {&zero, 1}, {&one, 1}, {&five, 1}, {&zero, 1}, pt2};
  Tensor q3(DType::kF32, {1, 3, 8});  // 3 heads over 2 kv heads
  EXPECT_THROW(Attention({q3.view(), q3.view(), {kc.view(), vc.view()}, &b2}), Error);
}

}  // namespace
}  // namespace pg::ops::testing
