// MoE router (ops_moe.h MoeRouter) in the op harness: closed forms (softmax top-k from sorted
// logits; group-limited sigmoid routing from an exhaustive search over group subsets), a
// hand-made case where the best expert's group is dropped, every backend against ref, the
// fused RMSNorm + router matmul, bf16 logits on the device. (Experts: moe_ops_test.cpp.)
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>

#include "core/quant.h"
#include "moe_test_util.h"

#if defined(PEREGRINE_HAVE_CUDA)
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/moe/moe_tuning.h"
#endif

namespace pg::ops::testing {
namespace {

// ---- router ------------------------------------------------------------------------------

TEST(MoeRouterOp, SoftmaxTopKMatchesSortedLogits) {
  PG_SEED_TRACE();
  for (bool renorm : {true, false}) {
    const int64_t n = 19, e = 13, k = 3;
    Tensor logits = F32({n, e}, 2.0f);
    Tensor ids(DType::kI32, {n, k}), w(DType::kF32, {n, k});
    MoeRouter({.logits = logits.view(), .topk_ids = ids.view(), .topk_weights = w.view(),
               .renormalize = renorm});
    for (int64_t t = 0; t < n; ++t) {
      const float* l = logits.data<float>() + t * e;
      std::vector<int> order(static_cast<size_t>(e));
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
      double z_all = 0, z_top = 0;
      for (int i = 0; i < e; ++i) z_all += std::exp(double(l[i]));
      for (int j = 0; j < k; ++j) z_top += std::exp(double(l[order[size_t(j)]]));
      for (int j = 0; j < k; ++j) {
        const int want = order[size_t(j)];
        EXPECT_EQ(ids.data<int32_t>()[t * k + j], want) << "token " << t << " rank " << j;
        const double p = std::exp(double(l[want])) / (renorm ? z_top : z_all);
        EXPECT_NEAR(w.data<float>()[t * k + j], p, 1e-6) << "token " << t << " rank " << j;
      }
    }
  }
}

// DeepSeek-V3 routing by exhaustive search: the chosen groups are the subset of topk_groups
// groups with the largest total group score; the experts are the best k of those groups.
TEST(MoeRouterOp, GroupLimitedSigmoidMatchesExhaustiveSearch) {
  PG_SEED_TRACE();
  const int64_t n = 23, e = 24, k = 5;
  const int groups = 6, topk_groups = 2, per = int(e / groups);
  const float scaling = 2.5f;
  Tensor logits = F32({n, e}, 1.5f), bias = F32({e}, 0.3f);
  Tensor ids(DType::kI32, {n, k}), w(DType::kF32, {n, k});
  MoeRouter({.logits = logits.view(), .bias = bias.view(), .topk_ids = ids.view(),
             .topk_weights = w.view(), .scoring = MoeScoring::kSigmoid, .num_groups = groups,
             .topk_groups = topk_groups, .renormalize = true, .scaling = scaling});
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> score(static_cast<size_t>(e)), choice(static_cast<size_t>(e));
    for (int i = 0; i < e; ++i) {
      score[size_t(i)] = 1.0 / (1.0 + std::exp(-double(logits.data<float>()[t * e + i])));
      choice[size_t(i)] = score[size_t(i)] + bias.data<float>()[i];
    }
    auto group_score = [&](int g) {
      std::vector<double> m(choice.begin() + g * per, choice.begin() + (g + 1) * per);
      std::sort(m.rbegin(), m.rend());
      return m[0] + m[1];
    };
    double best = -1e30;
    std::pair<int, int> best_pair;
    for (int a = 0; a < groups; ++a)
      for (int b = a + 1; b < groups; ++b)
        if (group_score(a) + group_score(b) > best) best = group_score(a) + group_score(b), best_pair = {a, b};
    std::vector<int> cand;
    for (int g : {best_pair.first, best_pair.second})
      for (int i = g * per; i < (g + 1) * per; ++i) cand.push_back(i);
    std::sort(cand.begin(), cand.end(), [&](int a, int b) { return choice[size_t(a)] > choice[size_t(b)]; });
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += score[size_t(cand[size_t(j)])];
    for (int j = 0; j < k; ++j) {
      EXPECT_EQ(ids.data<int32_t>()[t * k + j], cand[size_t(j)]) << "token " << t;
      // Weights come from the unbiased scores.
      EXPECT_NEAR(w.data<float>()[t * k + j], score[size_t(cand[size_t(j)])] / sum * scaling, 1e-5);
    }
  }
}

// The best single expert (0.95) sits in a group whose second expert is weak: the group is
// dropped, and experts 2 and 3 (0.6 each; tie -> lower index first) are chosen.
TEST(MoeRouterOp, BestExpertOfADroppedGroupIsNotChosen) {
  const float target[8] = {0.95f, 0.01f, 0.6f, 0.6f, 0.5f, 0.5f, 0.1f, 0.1f};
  Tensor logits(DType::kF32, {1, 8});
  for (int i = 0; i < 8; ++i) logits.data<float>()[i] = std::log(target[i] / (1 - target[i]));
  Tensor ids(DType::kI32, {1, 2}), w(DType::kF32, {1, 2});
  MoeRouter({.logits = logits.view(), .topk_ids = ids.view(), .topk_weights = w.view(),
             .scoring = MoeScoring::kSigmoid, .num_groups = 4, .topk_groups = 2,
             .renormalize = true, .scaling = 3.0f});
  EXPECT_EQ(ids.data<int32_t>()[0], 2);
  EXPECT_EQ(ids.data<int32_t>()[1], 3);
  EXPECT_NEAR(w.data<float>()[0], 1.5f, 1e-6);
  EXPECT_NEAR(w.data<float>()[1], 1.5f, 1e-6);
}

TEST(MoeRouterOp, RejectsBadShapes) {
  Tensor logits = F32({4, 12});
  Tensor ids(DType::kI32, {4, 7}), w(DType::kF32, {4, 7});
  // top_k 7 > topk_groups (1) x 3 experts per group.
  EXPECT_THROW(MoeRouter({.logits = logits.view(), .topk_ids = ids.view(),
                          .topk_weights = w.view(), .num_groups = 4, .topk_groups = 1}),
               Error);
  EXPECT_THROW(MoeRouter({.logits = logits.view(), .topk_ids = ids.view(),
                          .topk_weights = w.view(), .num_groups = 5}),
               Error);
}

struct RouterCase {
  int64_t tokens;
  int experts, top_k, groups, topk_groups;
  MoeScoring scoring;
  bool bias, renormalize;
  float scaling;
};

const std::vector<RouterCase>& RouterCases() {
  static const std::vector<RouterCase> cases = {
      {19, 13, 3, 1, 1, MoeScoring::kSoftmax, false, true, 1.0f},
      {7, 128, 8, 1, 1, MoeScoring::kSoftmax, false, true, 1.0f},      // Qwen3-30B-A3B
      {9, 64, 6, 1, 1, MoeScoring::kSoftmax, false, false, 1.0f},      // DeepSeek-V2-Lite
      {33, 256, 8, 8, 4, MoeScoring::kSigmoid, true, true, 2.5f},      // DeepSeek-V3
      {5, 384, 8, 1, 1, MoeScoring::kSigmoid, true, true, 2.827f},     // Kimi K2
      {3, 160, 16, 8, 3, MoeScoring::kSigmoid, true, false, 1.0f},     // top-16, 3 of 8 groups
      {4, 24, 5, 6, 2, MoeScoring::kSoftmax, false, true, 1.0f},       // softmax + groups
      // One token (the decode shapes; CUDA's one-block grid with a single working warp).
      {1, 128, 8, 1, 1, MoeScoring::kSoftmax, false, true, 1.0f},      // Qwen3-30B-A3B decode
      {1, 64, 6, 1, 1, MoeScoring::kSoftmax, false, false, 1.0f},      // DeepSeek-V2-Lite decode
      {1, 13, 3, 1, 1, MoeScoring::kSoftmax, false, true, 1.0f},
      {1, 97, 32, 1, 1, MoeScoring::kSigmoid, true, true, 1.7f},       // top-32
      {1, 8, 8, 1, 1, MoeScoring::kSoftmax, false, true, 1.0f},        // every expert
      {1, 256, 8, 8, 4, MoeScoring::kSigmoid, true, true, 2.5f},       // groups: one warp
  };
  return cases;
}

TEST(MoeRouterOp, EveryBackendMatchesReference) {
  PG_SEED_TRACE();
  Coverage cov;
  for (const RouterCase& c : RouterCases()) {
    SCOPED_TRACE(fmt::format("tokens {} experts {} k {} groups {}/{}", c.tokens, c.experts, c.top_k,
                             c.topk_groups, c.groups));
    Tensor logits = RampLogits(c.tokens, c.experts), bias = F32({c.experts}, 0.05f);
    Tensor ref_ids(DType::kI32, {c.tokens, c.top_k}), ref_w(DType::kF32, {c.tokens, c.top_k});
    MoeRouterParams p{.logits = logits.view(), .bias = c.bias ? bias.view() : TensorView{},
                      .topk_ids = ref_ids.view(), .topk_weights = ref_w.view(),
                      .scoring = c.scoring, .num_groups = c.groups, .topk_groups = c.topk_groups,
                      .renormalize = c.renormalize, .scaling = c.scaling};
    RunWith(RefImpl<MoeRouterParams>(), p);
    for (const auto* k : Backends<MoeRouterParams>()) {
      Tensor ids(DType::kI32, {c.tokens, c.top_k}), w(DType::kF32, {c.tokens, c.top_k});
      ids.Zero();
      w.Zero();
      p.topk_ids = ids.view();
      p.topk_weights = w.view();
      if (!RunBackend(*k, p)) continue;
      cov.Ran(k->backend);
      for (int64_t i = 0; i < ids.numel(); ++i) {
        ASSERT_EQ(ids.data<int32_t>()[i], ref_ids.data<int32_t>()[i]) << k->backend << " route " << i;
        EXPECT_NEAR(w.data<float>()[i], ref_w.data<float>()[i], 2e-6 * c.scaling) << k->backend;
      }
    }
  }
  cov.Check<MoeRouterParams>();
}

// Fused router matmul (MoeRouterParams::x / router), optionally behind a fused RMSNorm
// (+ residual add). The reference is exactly the reference RmsNorm, then the reference Matmul
// into the logits, then the reference router (checked bit for bit); every other backend's
// normed rows, residual and logits are held against the reference's, and its routing against
// the reference router run on the backend's own logits (no near-tie can flip the comparison).
struct FusedRouterCase {
  int64_t tokens, experts, hidden, top_k;
  int groups, topk_groups;
  MoeScoring scoring;
  bool bias;
  float scaling;
  bool norm, residual;
};

TEST(MoeRouterOp, FusedMatmulMatchesMatmulThenRouter) {
  PG_SEED_TRACE();
  const FusedRouterCase cases[] = {
      {1, 128, 2048, 8, 1, 1, MoeScoring::kSoftmax, false, 1.0f, true, true},   // Qwen3-30B-A3B decode
      {1, 128, 2048, 8, 1, 1, MoeScoring::kSoftmax, false, 1.0f, false, false},
      {3, 64, 2048, 6, 1, 1, MoeScoring::kSoftmax, false, 1.0f, true, false},   // V2-Lite / Moonlight
      {4, 256, 7168, 8, 8, 4, MoeScoring::kSigmoid, true, 2.5f, true, true},    // DeepSeek-V3 (rows > 2048)
      {4, 256, 7168, 8, 8, 4, MoeScoring::kSigmoid, true, 2.5f, false, false},
      {2, 24, 111, 5, 6, 2, MoeScoring::kSoftmax, true, 1.0f, true, true},      // odd hidden: scalar path
      {7, 13, 96, 3, 1, 1, MoeScoring::kSoftmax, false, 1.0f, false, false},    // 7 tokens, 13 experts
  };
  Coverage cov;
  for (const FusedRouterCase& c : cases) {
    SCOPED_TRACE(fmt::format("tokens {} experts {} hidden {} k {} norm {} residual {}", c.tokens,
                             c.experts, c.hidden, c.top_k, c.norm, c.residual));
    Tensor x = F32({c.tokens, c.hidden}), wf = F32({c.experts, c.hidden}, 0.05f);
    Tensor res0 = F32({c.tokens, c.hidden}), gamma = F32({c.hidden}, 0.3f);
    RoundToBf16(x);  // device backends see bf16 activations: the same inputs for all
    RoundToBf16(res0);
    for (int64_t i = 0; i < c.hidden; ++i) gamma.data<float>()[i] += 1.0f;
    Tensor router(DType::kBF16, {c.experts, c.hidden});
    for (int64_t r = 0; r < c.experts; ++r)
      quant::QuantizeRow(DType::kBF16, wf.data<float>() + r * c.hidden, router.view().row_ptr(r),
                         c.hidden);
    Tensor bias = F32({c.experts}, 0.05f);
    struct Outs {
      Tensor logits, ids, w, normed, residual;
    };
    auto outs = [&] {
      Outs o{Tensor(DType::kF32, {c.tokens, c.experts}), Tensor(DType::kI32, {c.tokens, c.top_k}),
             Tensor(DType::kF32, {c.tokens, c.top_k}), Tensor(DType::kF32, {c.tokens, c.hidden}),
             Tensor(DType::kF32, {c.tokens, c.hidden})};
      o.logits.Zero(), o.ids.Zero(), o.w.Zero(), o.normed.Zero();
      std::memcpy(o.residual.data<float>(), res0.data<float>(), size_t(res0.numel()) * 4);
      return o;
    };
    auto params = [&](Outs& o) {
      MoeRouterParams p{.logits = o.logits.view(), .bias = c.bias ? bias.view() : TensorView{},
                        .topk_ids = o.ids.view(), .topk_weights = o.w.view(),
                        .scoring = c.scoring, .num_groups = c.groups, .topk_groups = c.topk_groups,
                        .renormalize = true, .scaling = c.scaling, .x = x.view(),
                        .router = router.view()};
      if (c.norm) {
        p.norm_weight = gamma.view();
        p.normed = o.normed.view();
        p.norm_eps = 1e-6f;
        if (c.residual) p.residual = o.residual.view();
      }
      return p;
    };
    Outs ref = outs();
    RunWith(RefImpl<MoeRouterParams>(), params(ref));
    // The composition: reference RmsNorm, reference Matmul, then the reference router.
    {
      Outs o = outs();
      MoeRouterParams p = params(o);
      if (c.norm)
        RunWith(RefImpl<RmsNormParams>(),
                RmsNormParams{.x = x.view(), .weight = gamma.view(), .out = o.normed.view(),
                              .residual = p.residual, .eps = p.norm_eps});
      RunWith(RefImpl<MatmulParams>(),
              MatmulParams{.x = c.norm ? o.normed.view() : x.view(), .w = router.view(),
                           .out = o.logits.view()});
      p.x = p.router = p.norm_weight = p.normed = p.residual = TensorView{};
      RunWith(RefImpl<MoeRouterParams>(), p);
      ExpectExact(o.logits.data<float>(), ref.logits.data<float>(), o.logits.numel(), "ref logits");
      if (c.norm) ExpectExact(o.normed.data<float>(), ref.normed.data<float>(), o.normed.numel(), "ref normed");
      ExpectExact(o.residual.data<float>(), ref.residual.data<float>(), o.residual.numel(), "ref residual");
      for (int64_t i = 0; i < o.ids.numel(); ++i)
        ASSERT_EQ(o.ids.data<int32_t>()[i], ref.ids.data<int32_t>()[i]) << "route " << i;
      ExpectExact(o.w.data<float>(), ref.w.data<float>(), o.w.numel(), "ref weights");
    }
    for (const auto* k : Backends<MoeRouterParams>()) {
      Outs o = outs();
      if (!RunBackend(*k, params(o))) continue;
      cov.Ran(k->backend);
      // f32 accumulation over `hidden` products vs the reference's double; with the norm, the
      // device rounds the residual sum and the normed rows to bf16 (as it stores them) before
      // the products: bf16 tolerance (a GPU run saw nmse 1.01e-5 at hidden 111).
      ExpectClose(ref.logits.data<float>(), o.logits.data<float>(), o.logits.numel(),
                  c.norm ? kBf16 : Tolerance{1e-4, 1e-9}, k->backend + " logits");
      // The device's normed / residual rows are stored in bf16 after rounding its input sum to
      // bf16 as well: up to one bf16 ulp (2^-7 |v|) from the reference's rounded f32 value, so
      // the bound scales with max|ref| / rms (H200: a hidden-7168 row's 5.2-rms element sat one
      // ulp off, 0.0301 rms > kBf16's 0.03).
      auto bf16_store = [](const Tensor& ref) {
        double ss = 0, mx = 0;
        for (int64_t i = 0; i < ref.numel(); ++i) {
          const double v = ref.data<float>()[i];
          ss += v * v, mx = std::max(mx, std::fabs(v));
        }
        const double rms = std::sqrt(ss / double(std::max<int64_t>(ref.numel(), 1)));
        return Tolerance{std::max(kBf16.max_rel, rms > 0 ? mx / rms / 128.0 + 1e-3 : 0.0), kBf16.nmse};
      };
      if (c.norm)
        ExpectClose(ref.normed.data<float>(), o.normed.data<float>(), o.normed.numel(),
                    bf16_store(ref.normed), k->backend + " normed");
      if (c.residual)
        ExpectClose(ref.residual.data<float>(), o.residual.data<float>(), o.residual.numel(),
                    bf16_store(ref.residual), k->backend + " residual");
      Outs want = outs();
      MoeRouterParams p = params(want);
      p.logits = o.logits.view();
      p.x = p.router = p.norm_weight = p.normed = p.residual = TensorView{};
      RunWith(RefImpl<MoeRouterParams>(), p);
      for (int64_t i = 0; i < o.ids.numel(); ++i) {
        ASSERT_EQ(o.ids.data<int32_t>()[i], want.ids.data<int32_t>()[i]) << k->backend << " route " << i;
        EXPECT_NEAR(o.w.data<float>()[i], want.w.data<float>()[i], 2e-6 * c.scaling) << k->backend;
      }
    }
  }
  cov.Check<MoeRouterParams>();
}

#if defined(PEREGRINE_HAVE_CUDA)
// Exact ties on the device: logits of three levels, so many experts share a score; the
// reference takes the lower index first, and so must the device routing, one token and several.
TEST(MoeRouterOp, CudaTiesTakeTheLowerIndex) {
  PG_SEED_TRACE();
  for (const auto* k : Backends<MoeRouterParams>()) {
    if (!OnDevice(*k)) continue;
    for (const int64_t n : {1, 3}) {
      for (const int e : {128, 64, 37}) {
        SCOPED_TRACE(fmt::format("tokens {} experts {}", n, e));
        const int64_t topk = 8;
        // 3 levels a row, in a scattered order: about e / 3 experts share the top one.
        Tensor logits(DType::kF32, {n, int64_t(e)});
        for (int64_t t = 0; t < n; ++t)
          for (int i = 0; i < e; ++i)
            logits.data<float>()[t * e + i] = 0.5f * float((i * 7 + int(t)) % 3);
        Tensor ref_ids(DType::kI32, {n, topk}), ref_w(DType::kF32, {n, topk});
        Tensor ids(DType::kI32, {n, topk}), w(DType::kF32, {n, topk});
        MoeRouterParams p{.logits = logits.view(), .topk_ids = ref_ids.view(),
                          .topk_weights = ref_w.view(), .renormalize = true};
        RunWith(RefImpl<MoeRouterParams>(), p);
        p.topk_ids = ids.view();
        p.topk_weights = w.view();
        ASSERT_TRUE(RunBackend(*k, p));
        for (int64_t i = 0; i < ids.numel(); ++i) {
          ASSERT_EQ(ids.data<int32_t>()[i], ref_ids.data<int32_t>()[i]) << "route " << i;
          EXPECT_NEAR(w.data<float>()[i], ref_w.data<float>()[i], 2e-6);
        }
        // Ties did occur: some chosen weight equals its neighbour's.
        int equal = 0;
        for (int64_t t = 0; t < n; ++t)
          for (int64_t j = 1; j < topk; ++j) equal += w.data<float>()[t * topk + j] == w.data<float>()[t * topk + j - 1];
        EXPECT_GT(equal, 0);
      }
    }
  }
}

// bf16 logits on the device: the reference on the same (bf16-rounded) logits. Ramp spacing
// 6/64 survives bf16 rounding, so the choice is exact.
TEST(MoeRouterOp, CudaBf16Logits) {
  PG_SEED_TRACE();
  for (const auto* k : Backends<MoeRouterParams>()) {
    if (!OnDevice(*k)) continue;
    const int64_t n = 11, e = 64, topk = 6;
    Tensor logits = RampLogits(n, e), bias = F32({e}, 0.05f);
    RoundToBf16(logits);
    Tensor ref_ids(DType::kI32, {n, topk}), ref_w(DType::kF32, {n, topk});
    Tensor ids(DType::kI32, {n, topk}), w(DType::kF32, {n, topk});
    MoeRouterParams p{.logits = logits.view(), .bias = bias.view(), .topk_ids = ref_ids.view(),
                      .topk_weights = ref_w.view(), .scoring = MoeScoring::kSigmoid,
                      .num_groups = 4, .topk_groups = 2, .scaling = 1.5f};
    RunWith(RefImpl<MoeRouterParams>(), p);
    p.topk_ids = ids.view();
    p.topk_weights = w.view();
    DeviceMirror m;
    MoeRouterParams d = Mirror(m, p);
    d.logits = m.Act(p.logits, false);  // bf16 on the device
    ASSERT_TRUE(Accepts(*k, d));
    RunWith(*k, d);
    m.CopyBack();
    for (int64_t i = 0; i < ids.numel(); ++i) {
      ASSERT_EQ(ids.data<int32_t>()[i], ref_ids.data<int32_t>()[i]) << "route " << i;
      EXPECT_NEAR(w.data<float>()[i], ref_w.data<float>()[i], 5e-6);
    }
  }
}
#endif

}  // namespace
}  // namespace pg::ops::testing
