// The one-token MoE router forms of the device paths of Qwen3-MoE and DeepSeek-V2, each against
// the unfused route (norm + logits kernel, router kernel): the router folded through the o
// projection (PEREGRINE_MOE_FOLD_ROUTER, moe_device.cpp RunDeviceOutProjection; ops_moe.h
// MoeRouterParams::fold) and the router from the o projection's row dots
// (PEREGRINE_MOE_O_DOTS; ops_fused.h RowDots, MoeRouterParams::dots). The same dummy model is
// placed with the form off and on and decoded through the runner's graphs (teacher-forced), at
// every step.
//
// The shapes are the real models' attention and o projection (the one-row ring kernel takes
// the dots only there: 2048 rows, a block an SM) with 16 experts, all of them chosen
// (num_experts_per_tok = 16): the routing weights are then continuous in the logits, so the
// paths — which round the router's input differently (the fold skips y's and the normed row's
// bf16 roundings and rounds its folded matrix once; the dots skip the normed row's) — cannot
// choose different experts at a near-tie, and their logits differ by rounding only. Bound:
// both are bf16 evaluations of the same f32 model, each within the device golden tolerance
// (gpu_model_test.cpp: 0.05 sqrt(L / 3) of the logits' std), so at most twice that apart; a
// wrong fold column, dots slot, weight layer or normed row is off by O(1). Each form is
// deterministic: a second run gives the same bits. (Which path ran: the form's launch counter,
// which graph capture advances.)
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/cuda/common/context.h"
#include "kernels/cuda/gemm/fp8_ring_mma.h"
#include "kernels/cuda/moe/moe_params.h"
#include "teacher_forced.h"

namespace pg {
namespace {

// `base` (a shape-only config) with `layers` layers and 16 experts, every one chosen, written
// to a temporary folder; returns the config.json's path.
std::string SmallMoeConfig(const std::string& base, int layers, const std::string& tag) {
  std::ifstream in(base);
  nlohmann::json j = nlohmann::json::parse(in);
  j["num_hidden_layers"] = layers;
  if (j.contains("num_experts")) j["num_experts"] = 16, j["num_experts_per_tok"] = 16;
  if (j.contains("n_routed_experts")) j["n_routed_experts"] = 16, j["num_experts_per_tok"] = 16;
  const auto dir = std::filesystem::temp_directory_path() / ("pg-dots-" + tag);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "config.json").string();
  std::ofstream(path) << j.dump(2);
  return path;
}

// A router form: its switch and its launch counter.
struct RouteForm {
  const char* env;
  int64_t (*launches)();
};
constexpr RouteForm kFold{"PEREGRINE_MOE_FOLD_ROUTER", &cuda::FoldRouteLaunches};
constexpr RouteForm kDots{"PEREGRINE_MOE_O_DOTS", &cuda::Bf16RingDotsLaunches};

void ExpectFormMatches(const std::string& config, const RouteForm& form) {
  ASSERT_GT(cuda::DeviceCount(), 0) << "no CUDA device: this test runs on the GPU machine";
  std::vector<int32_t> prompt, tokens;
  for (int i = 0; i < 41; ++i) prompt.push_back(int32_t((i * 7919 + 13) % 100000));
  for (int i = 0; i < 16; ++i) tokens.push_back(int32_t((i * 104729 + 5) % 100000));
  std::vector<std::vector<float>> logits[2];
  int num_layers = 0;
  for (int on = 0; on < 2; ++on) {
    setenv(kFold.env, "0", 1);
    setenv(kDots.env, "0", 1);
    setenv(form.env, on ? "1" : "0", 1);
    const int64_t launches0 = form.launches();
    testing::Placed p = testing::PlaceForDecode(config, /*dummy=*/true, 256);
    num_layers = p.model->config().num_layers;
    logits[on] = testing::TeacherForced(p, prompt, tokens);
    if (on) {
      EXPECT_GT(form.launches(), launches0) << form.env << "=1: the form never ran";
      const auto again = testing::TeacherForced(p, prompt, tokens);
      int differ = 0;
      for (size_t t = 0; t < again.size(); ++t) differ += again[t] != logits[on][t];
      EXPECT_EQ(differ, 0) << form.env << "=1 run twice: steps with different logits";
    } else {
      EXPECT_EQ(form.launches(), launches0) << form.env << "=0 ran the form";
    }
  }
  unsetenv(kFold.env);
  unsetenv(kDots.env);
  const testing::Diff d = testing::Compare(logits[0], logits[1]);
  const double bound = 2 * 0.05 * std::sqrt(std::max(num_layers, 3) / 3.0);
  std::printf("%s, %s over %zu steps: vs unfused max|diff| %.3g = %.4f std (step %zu; bound "
              "%.3f), argmax differs at %d steps\n",
              config.c_str(), form.env, logits[0].size(), d.worst_abs, d.worst_over_std,
              d.worst_step, bound, d.argmax_differs);
  EXPECT_LE(d.worst_over_std, bound) << "step " << d.worst_step;
}

TEST(GpuMoeDots, Qwen3MoeMatchesTheUnfusedRoute) {
  ExpectFormMatches(SmallMoeConfig("configs/qwen3-30b-a3b/config.json", 3, "qwen3"), kDots);
}

TEST(GpuMoeDots, DeepseekV2LiteMatchesTheUnfusedRoute) {
  ExpectFormMatches(SmallMoeConfig("configs/deepseek-v2-lite/config.json", 3, "v2lite"), kDots);
}

TEST(GpuMoeFold, Qwen3MoeMatchesTheUnfusedRoute) {
  ExpectFormMatches(SmallMoeConfig("configs/qwen3-30b-a3b/config.json", 3, "qwen3"), kFold);
}

TEST(GpuMoeFold, DeepseekV2LiteMatchesTheUnfusedRoute) {
  ExpectFormMatches(SmallMoeConfig("configs/deepseek-v2-lite/config.json", 3, "v2lite"), kFold);
}

}  // namespace
}  // namespace pg
