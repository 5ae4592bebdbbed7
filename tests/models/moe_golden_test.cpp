// MoE / MLA models against Hugging Face transformers (tools/golden/make_moe_goldens.py, run
// on the GPU machine in float32). For each model and prompt (1, 7, 33, 100 tokens):
//  * the full-vocab logits after the prompt agree within max|ours - hf| <= 1e-4 * std(hf), and
//  * the 64-token greedy continuation is identical.
// The prompt is prefilled in chunks of 37 tokens over 16-token pages (MLA expanded over a
// cached prefix), and the continuation decodes one token at a time (MLA absorbed).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/loader.h"
#include "golden_util.h"
#include "models/model.h"
#include "runtime/sequence_runner.h"

namespace pg {
namespace {

using testing::GoldenCase;
using testing::LoadGolden;

void CheckGolden(const std::string& dir, double max_abs_over_std) {
  ASSERT_TRUE(std::filesystem::exists(dir + "/golden.json"))
      << dir << "/golden.json is missing: generate it on the GPU machine with "
      << "tools/golden/make_moe_goldens.py --out tests/data/models";
  auto model = models::LoadModel({.path = dir});
  auto cases = LoadGolden(dir);
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
    const double sd = std::sqrt(var / double(g.logits.size()));
    for (size_t i = 0; i < logits.size(); ++i)
      max_abs = std::max(max_abs, std::fabs(double(logits[i]) - double(g.logits[i])));
    EXPECT_LE(max_abs / sd, max_abs_over_std)
        << dir << " case " << ci << ": max |diff| " << max_abs << ", logit std " << sd;
    runner.Reset();
    runtime::SamplingParams sp;
    sp.temperature = 0;
    runtime::SamplerState st(sp, g.prompt, 0);
    auto out = runtime::Generate(runner, g.prompt, st, {.max_new_tokens = int(g.greedy.size())});
    EXPECT_EQ(out, g.greedy) << dir << " case " << ci;
  }
}

TEST(MoeGolden, TinyQwen3Moe) { CheckGolden("tests/data/models/tiny-qwen3-moe", 1e-4); }
TEST(MoeGolden, TinyDeepseekV3) { CheckGolden("tests/data/models/tiny-deepseek-v3", 1e-4); }
// fp8 weights dequantized on load to exactly HF's float(q) * scale_inv.
TEST(MoeGolden, TinyDeepseekV3Fp8BlockScaled) {
  CheckGolden("tests/data/models/tiny-deepseek-v3-fp8", 1e-4);
}
// The latent dims the fast CUDA MLA kernels are compiled for (rank 512, rope 64).
TEST(MoeGolden, TinyDeepseekV3Mla512) {
  CheckGolden("tests/data/models/tiny-deepseek-v3-mla512", 1e-4);
}
TEST(MoeGolden, TinyDeepseekV3Mla512Fp8) {
  CheckGolden("tests/data/models/tiny-deepseek-v3-mla512-fp8", 1e-4);
}

}  // namespace
}  // namespace pg
