// The one-token routing inside MoeExperts as one cluster kernel (MoeTuning::walk_route_cluster,
// moe_router.cu NormRouteClusterKernel) against the two-kernel form it replaces (NormLogits +
// the logits-form router kernel): every bit of the logits, normed row, routes, weights and
// output must be the same, and the routes must be the reference router's on those logits.
// Shapes: Qwen3-30B-A3B's routing (128 experts, top 8, RMSNorm, hidden 2048: 2 rows a warp at
// 8 blocks, 1 at 16), DeepSeek-V2-Lite's (64 experts, top 6, no renormalisation, 2 shared
// experts), a router without the norm, and group-limited sigmoid routing with a bias and
// scaling over 24 experts (most warps own no expert). Forms that cannot take the cluster (two
// tokens, a residual) must fall back to the two-kernel form with the same results.
#include <fmt/format.h>

#include <cstring>

#include "moe_test_util.h"

#if defined(PEREGRINE_HAVE_CUDA)
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/moe/moe_params.h"  // MoeRouterClusterLaunches
#include "kernels/cuda/moe/moe_tuning.h"
#endif

namespace pg::ops::testing {
namespace {

#if defined(PEREGRINE_HAVE_CUDA)
struct ClusterCase {
  int64_t tokens, hidden, inter;
  int experts, top_k, groups, topk_groups;
  MoeScoring scoring;
  bool bias, renormalize, norm, residual;
  float scaling;
  int64_t num_shared;
  bool eligible;  // the cluster form may take it
};

TEST(MoeExpertsOp, CudaClusterRouteChangesNoBit) {
  PG_SEED_TRACE();
  const auto* cuda_impl = Registry::Global().table<MoeExpertsParams>().Find("cuda");
  ASSERT_NE(cuda_impl, nullptr) << "no CUDA backend registered";
  const ClusterCase cases[] = {
      {1, 2048, 64, 128, 8, 1, 1, MoeScoring::kSoftmax, false, true, true, false, 1.0f, 0, true},   // Qwen3
      {1, 2048, 64, 64, 6, 1, 1, MoeScoring::kSoftmax, false, false, true, false, 1.0f, 2, true},   // V2-Lite
      {1, 256, 64, 128, 8, 1, 1, MoeScoring::kSoftmax, false, true, false, false, 1.0f, 0, true},   // no norm
      {1, 264, 32, 24, 5, 6, 2, MoeScoring::kSigmoid, true, true, true, false, 2.5f, 1, true},      // groups
      {2, 256, 64, 128, 8, 1, 1, MoeScoring::kSoftmax, false, true, true, false, 1.0f, 0, false},   // 2 tokens
      {1, 256, 64, 128, 8, 1, 1, MoeScoring::kSoftmax, false, true, true, true, 1.0f, 0, false},    // residual
  };
  for (const ClusterCase& c : cases) {
    SCOPED_TRACE(fmt::format("tokens {} hidden {} experts {} k {} norm {} residual {}", c.tokens,
                             c.hidden, c.experts, c.top_k, c.norm, c.residual));
    const int64_t n = c.tokens, h = c.hidden, E = c.experts, k = c.top_k;
    ExpertSet ex = MakeExperts(c.experts, h, c.inter, DType::kBF16);
    ExpertSet sh = MakeExperts(1, h, std::max<int64_t>(c.num_shared, 1) * c.inter, DType::kBF16);
    Tensor x = F32({n, h}), res = F32({n, h}), gamma = F32({h}, 0.3f), bias = F32({E}, 0.05f);
    Tensor wf = F32({E, h}, 0.05f), router(DType::kBF16, {E, h});
    RoundToBf16(x);
    RoundToBf16(res);
    for (int64_t i = 0; i < h; ++i) gamma.data<float>()[i] += 1.0f;
    for (int64_t r = 0; r < E; ++r)
      quant::QuantizeRow(DType::kBF16, wf.data<float>() + r * h, router.view().row_ptr(r), h);
    std::vector<std::vector<float>> base;  // the two-kernel run: logits, normed, weights, out
    std::vector<int32_t> base_ids;
    for (int cluster : {0, 8, 16}) {
      SCOPED_TRACE(fmt::format("cluster {}", cluster));
      Tensor logits = F32({n, E}), ids(DType::kI32, {n, k}), w = F32({n, k});
      Tensor normed = F32({n, h}), out = F32({n, h}), resid = F32({n, h});
      logits.Zero(), ids.Zero(), w.Zero(), normed.Zero(), out.Zero();
      std::memcpy(resid.data<float>(), res.data<float>(), size_t(res.nbytes()));
      MoeRouterParams rp{.logits = logits.view(), .bias = c.bias ? bias.view() : TensorView{},
                         .topk_ids = ids.view(), .topk_weights = w.view(), .scoring = c.scoring,
                         .num_groups = c.groups, .topk_groups = c.topk_groups,
                         .renormalize = c.renormalize, .scaling = c.scaling};
      rp.x = x.view(), rp.router = router.view();
      if (c.norm) {
        rp.norm_weight = gamma.view(), rp.normed = normed.view(), rp.norm_eps = 1e-6f;
        if (c.residual) rp.residual = resid.view();
      }
      MoeExpertsParams p{.x = c.norm ? normed.view() : x.view(), .topk_ids = ids.view(),
                         .topk_weights = w.view(), .experts = ex.views, .out = out.view(),
                         .route = &rp};
      if (c.num_shared) p.shared = sh.views[0];
      cuda::MoeTuning t;
      t.path = cuda::MoePath::kWalk;
      t.walk_route_cluster = cluster;
      cuda::SetMoeTuning(t);
      const long long launches0 = cuda::MoeRouterClusterLaunches();
      const bool ran = RunBackend(*cuda_impl, p);
      cuda::SetMoeTuning({});
      ASSERT_TRUE(ran) << "the CUDA backend declined";
      EXPECT_EQ(cuda::MoeRouterClusterLaunches() - launches0, cluster && c.eligible ? 1 : 0)
          << "cluster form taken";
      const std::vector<std::vector<float>> got = {Copy(logits), Copy(normed), Copy(w), Copy(out)};
      const std::vector<int32_t> got_ids(ids.data<int32_t>(), ids.data<int32_t>() + n * k);
      if (base.empty()) {
        // The reference router on the device's logits chooses the same experts.
        Tensor want_ids(DType::kI32, {n, k}), want_w = F32({n, k});
        RunWith(RefImpl<MoeRouterParams>(),
                MoeRouterParams{.logits = logits.view(), .bias = rp.bias,
                                .topk_ids = want_ids.view(), .topk_weights = want_w.view(),
                                .scoring = c.scoring, .num_groups = c.groups,
                                .topk_groups = c.topk_groups, .renormalize = c.renormalize,
                                .scaling = c.scaling});
        for (int64_t i = 0; i < n * k; ++i) {
          EXPECT_EQ(got_ids[size_t(i)], want_ids.data<int32_t>()[i]) << "route " << i;
          EXPECT_NEAR(got[2][size_t(i)], want_w.data<float>()[i], 2e-6 * c.scaling) << "weight " << i;
        }
        base = got, base_ids = got_ids;
        continue;
      }
      EXPECT_EQ(got_ids, base_ids) << "routes";
      const char* what[] = {"logits", "normed", "weights", "out"};
      for (size_t i = 0; i < got.size(); ++i)
        ExpectExact(base[i].data(), got[i].data(), int64_t(got[i].size()), what[i]);
    }
  }
}
#endif

}  // namespace
}  // namespace pg::ops::testing
