// Golden tests against Hugging Face transformers (tools/golden/make_model_goldens.py, run on
// the GPU machine in float32). For each model and prompt:
//  * the full-vocab logits after the prompt agree within a stated tolerance, and
//  * the 64-token greedy continuation is identical.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/cpu/cpu_features.h"
#include "kernels/registry.h"
#include "models/loader.h"
#include "golden_util.h"
#include "models/model.h"
#include "runtime/sequence_runner.h"

namespace pg {
namespace {

using testing::GoldenCase;
using testing::LoadGolden;

struct Tolerance {
  float max_abs_over_std;   // max |ours - hf| / std(hf logits)
  // Greedy tokens must be identical up to the first step where HF's top-1 margin is below
  // this (a near-tie that a stated logit error may legitimately flip); 0 = all identical.
  float tie_margin = 0.0f;
};

void CheckModel(const std::string& model_path, const std::string& golden_dir, Tolerance tol) {
  auto model = models::LoadModel({.path = model_path});
  auto cases = LoadGolden(golden_dir);
  ASSERT_FALSE(cases.empty());
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const GoldenCase& g = cases[ci];
    runtime::SequenceRunner runner(*model, {.max_context = 512, .page_size = 16, .prefill_chunk = 37});
    std::span<float> logits = runner.Append(g.prompt);
    ASSERT_EQ(logits.size(), g.logits.size());
    double mean = 0, var = 0, max_abs = 0;
    for (float v : g.logits) mean += v;
    mean /= double(g.logits.size());
    for (float v : g.logits) var += (v - mean) * (v - mean);
    double sd = std::sqrt(var / double(g.logits.size()));
    for (size_t i = 0; i < logits.size(); ++i)
      max_abs = std::max(max_abs, std::fabs(double(logits[i]) - double(g.logits[i])));
    EXPECT_LE(max_abs / sd, tol.max_abs_over_std)
        << golden_dir << " case " << ci << ": max |diff| " << max_abs << ", logit std " << sd;
    // Greedy continuation: token-for-token identical.
    runner.Reset();
    runtime::SamplingParams sp;
    sp.temperature = 0;
    runtime::SamplerState st(sp, g.prompt, 0);
    auto out = runtime::Generate(runner, g.prompt, st, {.max_new_tokens = int(g.greedy.size())});
    size_t first_diff = 0;
    while (first_diff < out.size() && first_diff < g.greedy.size() && out[first_diff] == g.greedy[first_diff])
      ++first_diff;
    if (tol.tie_margin <= 0 || first_diff >= g.greedy.size()) {
      EXPECT_EQ(out, g.greedy) << golden_dir << " case " << ci << ": first difference at token "
                               << first_diff;
    } else {
      // Identical up to the first difference, and that difference is at a near-tie of HF's.
      ASSERT_LT(first_diff, g.margins.size());
      EXPECT_LT(g.margins[first_diff], tol.tie_margin)
          << golden_dir << " case " << ci << ": diverged at token " << first_diff
          << " where HF's top-1 margin is " << g.margins[first_diff];
      std::printf("%s case %zu: identical for %zu of %zu tokens; then a near-tie (HF margin %.4f)\n",
                  golden_dir.c_str(), ci, first_diff, g.greedy.size(), g.margins[first_diff]);
    }
  }
}

TEST(ModelGolden, TinyLlamaSafetensors) {
  CheckModel("tests/data/models/tiny-llama", "tests/data/models/tiny-llama", {1e-4f});
}

TEST(ModelGolden, TinyLlamaHd128) {
  CheckModel("tests/data/models/tiny-llama-hd128", "tests/data/models/tiny-llama-hd128", {1e-4f});
}

TEST(ModelGolden, TinyQwen3Safetensors) {
  CheckModel("tests/data/models/tiny-qwen3", "tests/data/models/tiny-qwen3", {1e-4f});
}

// The reference kernels (f32 activations, weights dequantized to f32) compute exactly
// what transformers computes from the dequantized GGUF, so they must match tightly.
TEST(ModelGolden, SmolLM2EmbeddedGgufReferenceKernels) {
  std::string path = models::EmbeddedModelPath();
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " missing: run scripts/lib/setup.sh";
  ops::SetMaxKernelPriority(ops::kPriorityRef);
  struct Restore {  // also when CheckModel throws
    ~Restore() { ops::SetMaxKernelPriority(std::numeric_limits<int>::max()); }
  } restore;
  CheckModel(path, "tests/data/models/smollm2", {1e-3f});
}

TEST(ModelGolden, SmolLM2EmbeddedGguf) {
  std::string path = models::EmbeddedModelPath();
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " missing: run scripts/lib/setup.sh";
  // The fast kernels quantize activations per 32-value block for the Q4_1 / Q8_0 dot
  // products, which moves logits by up to ~0.35 standard deviations on this 135M model, and
  // near-ties of HF's greedy path may then flip. With AVX-512 VNNI the Q4_1 activations keep
  // 16 bits (flips below a 0.1 margin); the AVX2 kernel keeps 8 (as llama.cpp does): an
  // AVX2-only EPYC (session 10) measured max |diff| 0.55-1.05 logits (0.16-0.29 std) and
  // flips at margins 0.012 / 0.091 / 0.135, so its bound is 0.25.
  const float tie = ops::cpu::Features().vnni ? 0.1f : 0.25f;
  CheckModel(path, "tests/data/models/smollm2", {0.35f, tie});
}

}  // namespace
}  // namespace pg
