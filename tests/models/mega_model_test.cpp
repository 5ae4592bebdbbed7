// The persistent batch-1 decode kernel in the llama device path (PEREGRINE_MEGA, ops_mega.h):
// the same model placed with the mega path off and on, decoded through the runner's CUDA
// graphs (teacher-forced: the same tokens), at every step:
//  * PEREGRINE_MEGA_ATTN=0 with PEREGRINE_MEGA_TILES=1 (projections in the mega kernel's tile
//    mode, attention in its usual kernels): the GEMV steps compute bitwise what the fused GEMV
//    ops compute (tests/ops/mega_test.cpp), so the logits must be IDENTICAL (max |diff| 0);
//  * PEREGRINE_MEGA_WARP=1 (warp mode, mega_warp.cu, attention apart): bitwise as well;
//  * the whole step in one launch (attention inside, row-mode GEMV steps): the steps round
//    where RopeKvWrite + Attention and the GEMV ops round and differ by f32 summation order
//    only, i.e. the two runs
//    are two bf16 evaluations of the same f32 model. Bound: each is within the device golden
//    tolerance of the f32 model (gpu_model_test.cpp: 0.05 sqrt(L / 3) of the logits' std), so
//    they differ by at most twice that (triangle inequality);
// on tiny-llama-hd128 (HF goldens' prompts and tokens; its HF golden check through the mega
// path is GpuModelGolden.TinyLlamaHd128 run with PEREGRINE_MEGA=1) and a dummy Llama-3.1-8B
// (random weights of the real shapes, one seed for every placement).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "golden_util.h"
#include "teacher_forced.h"
#include "kernels/cuda/common/context.h"
#include "kernels/ops_mega.h"
#include "models/loader.h"
#include "models/model.h"
#include "runtime/cuda/gpu_decode_bench.h"
#include "runtime/cuda/gpu_runner.h"

namespace pg {
namespace {

using testing::Compare;
using testing::Diff;
using testing::Placed;
using testing::PlaceForDecode;
using testing::TeacherForced;

enum class Mode { kOff, kMegaSplit, kMegaWhole, kMegaWarp };

// Places the model (a folder, or a config.json with dummy weights) in this mode.
Placed PlaceWith(Mode mode, const std::string& path, bool dummy, int context) {
  setenv("PEREGRINE_MEGA", mode == Mode::kOff ? "0" : "1", 1);
  setenv("PEREGRINE_MEGA_ATTN", mode == Mode::kMegaSplit ? "0" : "1", 1);
  setenv("PEREGRINE_MEGA_TILES", mode == Mode::kMegaSplit ? "1" : "0", 1);
  setenv("PEREGRINE_MEGA_WARP", mode == Mode::kMegaWarp ? "1" : "0", 1);
  Placed p = PlaceForDecode(path, dummy, context);
  unsetenv("PEREGRINE_MEGA");
  unsetenv("PEREGRINE_MEGA_ATTN");
  unsetenv("PEREGRINE_MEGA_TILES");
  unsetenv("PEREGRINE_MEGA_WARP");
  return p;
}

void ExpectMegaMatches(const std::string& path, bool dummy, std::span<const int32_t> prompt,
                       std::span<const int32_t> tokens, int context) {
  ASSERT_GT(cuda::DeviceCount(), 0) << "no CUDA device: this test runs on the GPU machine";
  // Every mode runs attention as RopeKvWrite + Attention (the mega modes that keep attention
  // apart call those ops), so the reference path must too: the fused decode attention
  // (PEREGRINE_FUSED_ATTN, default on) sums in another order and is not bitwise the same.
  setenv("PEREGRINE_FUSED_ATTN", "0", 1);
  struct Restore {
    ~Restore() { unsetenv("PEREGRINE_FUSED_ATTN"); }
  } restore;
  std::vector<std::vector<float>> logits[4];
  int num_layers = 0;
  for (Mode mode : {Mode::kOff, Mode::kMegaSplit, Mode::kMegaWhole, Mode::kMegaWarp}) {
    const int64_t launches0 = ops::MegaLaunches();
    Placed p = PlaceWith(mode, path, dummy, context);
    num_layers = p.model->config().num_layers;
    logits[int(mode)] = TeacherForced(p, prompt, tokens);
    if (mode != Mode::kOff) {
      EXPECT_GT(ops::MegaLaunches(), launches0) << "the mega path never ran";
    }
    if (mode == Mode::kMegaWhole) {
      // The kernel is deterministic (fixed splits, merge order and tiles): the same run again
      // (same prompt, same tokens, same cache slots rewritten) gives the same bits; a race
      // would show here as a difference.
      const auto again = TeacherForced(p, prompt, tokens);
      int differ = 0;
      for (size_t t = 0; t < again.size(); ++t) differ += again[t] != logits[int(mode)][t];
      EXPECT_EQ(differ, 0) << "mega run twice: steps with different logits";
    }
  }
  const Diff split = Compare(logits[0], logits[1]), whole = Compare(logits[0], logits[2]),
             warp = Compare(logits[0], logits[3]);
  const double bound = 2 * 0.05 * std::sqrt(std::max(num_layers, 3) / 3.0);
  std::printf("%s over %zu steps: mega (attention apart) max|diff| %.3g; mega (one launch) "
              "max|diff| %.3g = %.4f std (step %zu; bound %.3f), argmax differs at %d steps\n",
              path.c_str(), logits[0].size(), split.worst_abs, whole.worst_abs,
              whole.worst_over_std, whole.worst_step, bound, whole.argmax_differs);
  EXPECT_EQ(split.worst_abs, 0.0) << "mega projections differ from the fused GEMV ops (step "
                                  << split.worst_step << ")";
  std::printf("%s: mega warp mode max|diff| %.3g\n", path.c_str(), warp.worst_abs);
  EXPECT_EQ(warp.worst_abs, 0.0) << "mega warp mode differs from the fused GEMV ops (step "
                                 << warp.worst_step << ")";
  EXPECT_LE(whole.worst_over_std, bound) << "step " << whole.worst_step;
}

TEST(GpuMegaModel, TinyLlamaHd128MatchesDevicePath) {
  auto cases = testing::LoadGolden("tests/data/models/tiny-llama-hd128");
  ASSERT_FALSE(cases.empty());
  for (size_t ci = 0; ci < std::min<size_t>(cases.size(), 2); ++ci) {
    SCOPED_TRACE("case " + std::to_string(ci));
    ExpectMegaMatches("tests/data/models/tiny-llama-hd128", false, cases[ci].prompt,
                      cases[ci].greedy, 512);
  }
}

TEST(GpuMegaModel, DummyLlama8BMatchesDevicePath) {
  std::vector<int32_t> prompt, tokens;
  for (int i = 0; i < 45; ++i) prompt.push_back(int32_t((i * 7919 + 13) % 128000));
  for (int i = 0; i < 24; ++i) tokens.push_back(int32_t((i * 104729 + 5) % 128000));
  ExpectMegaMatches("configs/llama-3.1-8b/config.json", true, prompt, tokens, 1024);
}

}  // namespace
}  // namespace pg
