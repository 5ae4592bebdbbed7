// The MoE router from the o projection's row dots (PEREGRINE_MOE_O_DOTS, moe_device.cpp
// RunDeviceOutProjection; ops_fused.h RowDots, ops_moe.h MoeRouterParams::dots) in the device
// paths of Qwen3-MoE and DeepSeek-V2: the same dummy model placed with it off and on, decoded
// through the runner's graphs (teacher-forced), at every step.
//
// The shapes are the real models' attention and o projection (the one-row ring kernel takes
// the dots only there: 2048 rows, a block an SM) with 16 experts, all of them chosen
// (num_experts_per_tok = 16): the routing weights are then continuous in the logits, so the
// two paths — which round the router's input differently (the normed row in bf16 before the
// product, or not at all) — cannot choose different experts at a near-tie, and their logits
// differ by rounding only. Bound: both are bf16 evaluations of the same f32 model, each within
// the device golden tolerance (gpu_model_test.cpp: 0.05 sqrt(L / 3) of the logits' std), so
// at most twice that apart; a wrong dots slot, column, weight layer or normed row is off by
// O(1). The dots path is deterministic: a second run gives the same bits. (Which path ran:
// the RowDots launch counter, which graph capture advances.)
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/cuda/common/context.h"
#include "kernels/cuda/gemm/fp8_ring_mma.h"
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

void ExpectDotsMatch(const std::string& config) {
  ASSERT_GT(cuda::DeviceCount(), 0) << "no CUDA device: this test runs on the GPU machine";
  std::vector<int32_t> prompt, tokens;
  for (int i = 0; i < 41; ++i) prompt.push_back(int32_t((i * 7919 + 13) % 100000));
  for (int i = 0; i < 16; ++i) tokens.push_back(int32_t((i * 104729 + 5) % 100000));
  std::vector<std::vector<float>> logits[2];
  int num_layers = 0;
  for (int on = 0; on < 2; ++on) {
    setenv("PEREGRINE_MOE_O_DOTS", on ? "1" : "0", 1);
    const int64_t launches0 = cuda::Bf16RingDotsLaunches();
    testing::Placed p = testing::PlaceForDecode(config, /*dummy=*/true, 256);
    num_layers = p.model->config().num_layers;
    logits[on] = testing::TeacherForced(p, prompt, tokens);
    if (on) {
      EXPECT_GT(cuda::Bf16RingDotsLaunches(), launches0) << "the dots path never ran";
      const auto again = testing::TeacherForced(p, prompt, tokens);
      int differ = 0;
      for (size_t t = 0; t < again.size(); ++t) differ += again[t] != logits[on][t];
      EXPECT_EQ(differ, 0) << "dots path run twice: steps with different logits";
    } else {
      EXPECT_EQ(cuda::Bf16RingDotsLaunches(), launches0) << "PEREGRINE_MOE_O_DOTS=0 ran the dots path";
    }
  }
  unsetenv("PEREGRINE_MOE_O_DOTS");
  const testing::Diff d = testing::Compare(logits[0], logits[1]);
  const double bound = 2 * 0.05 * std::sqrt(std::max(num_layers, 3) / 3.0);
  std::printf("%s over %zu steps: dots vs unfused max|diff| %.3g = %.4f std (step %zu; bound %.3f), "
              "argmax differs at %d steps\n",
              config.c_str(), logits[0].size(), d.worst_abs, d.worst_over_std, d.worst_step, bound,
              d.argmax_differs);
  EXPECT_LE(d.worst_over_std, bound) << "step " << d.worst_step;
}

TEST(GpuMoeDots, Qwen3MoeMatchesTheUnfusedRoute) {
  ExpectDotsMatch(SmallMoeConfig("configs/qwen3-30b-a3b/config.json", 3, "qwen3"));
}

TEST(GpuMoeDots, DeepseekV2LiteMatchesTheUnfusedRoute) {
  ExpectDotsMatch(SmallMoeConfig("configs/deepseek-v2-lite/config.json", 3, "v2lite"));
}

}  // namespace
}  // namespace pg
