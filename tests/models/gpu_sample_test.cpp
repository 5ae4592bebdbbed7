// GpuRunner's device sampling and fp8 weight placement on a real model (tiny-llama), on the
// GPU machine:
//  * GpuRunner::Sample draws, for every filter and with penalties from the slot's token
//    counts, exactly the token ops::Sample's CPU reference draws from the same logits (read
//    back: bf16 values, exact in f32), and its logprobs agree;
//  * fp8 e4m3 weights (per-tensor scales) keep the logits within e4m3 rounding of the same
//    model's bf16-weight logits (bound derived at the test), and bf16 stays at HF's goldens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "golden_util.h"
#include "kernels/cuda/common/context.h"
#include "kernels/registry.h"
#include "models/loader.h"
#include "models/model.h"
#include "runtime/cuda/gpu_runner.h"

namespace pg {
namespace {

namespace rt = runtime::cuda;

constexpr const char* kModel = "tests/data/models/tiny-llama";

struct Placed {
  std::unique_ptr<rt::GpuRunner> runner;
  std::unique_ptr<models::Model> model;
};

Placed Place(DType weight_dtype) {
  Placed g;
  g.runner = std::make_unique<rt::GpuRunner>(
      rt::GpuRunnerOptions{.gpu_memory_utilization = 0.3, .max_batch_tokens = 512, .page_size = 16});
  g.model = models::LoadModel({.path = kModel});
  g.model->PlaceOnDevice(g.runner->memory(), {.max_batch_tokens = 512, .weight_dtype = weight_dtype});
  g.runner->Attach(*g.model);
  g.runner->ConfigureKv(/*num_slots=*/4, 256);
  return g;
}

ops::SampleRow Row(float t, int k, float p, float min_p, uint64_t seed) {
  ops::SampleRow r;
  r.temperature = t, r.top_k = k, r.top_p = p, r.min_p = min_p;
  r.seed_lo = uint32_t(seed), r.seed_hi = uint32_t(seed >> 32);
  return r;
}

TEST(GpuSampling, RunnerSampleMatchesTheReference) {
  ASSERT_GT(cuda::DeviceCount(), 0) << "no CUDA device: this test runs on the GPU machine";
  Placed g = Place(DType::kBF16);
  const int vocab = g.model->config().vocab_size;
  auto cases = testing::LoadGolden(kModel);
  ASSERT_FALSE(cases.empty());
  const std::vector<int32_t>& prompt = cases[0].prompt;
  // Four sequences (slots 0-3) on the same prompt, each with its own filter.
  std::vector<ops::SampleRow> rows = {Row(0.0f, 0, 1.0f, 0.0f, 1), Row(1.0f, 0, 1.0f, 0.0f, 2),
                                      Row(0.7f, 20, 0.9f, 0.0f, 3), Row(1.2f, 0, 0.95f, 0.05f, 4)};
  rows[3].repetition_penalty = 1.3f, rows[3].presence_penalty = 0.4f;
  rows[3].frequency_penalty = 0.2f, rows[3].counts_row = 3;
  g.runner->ResetTokenCounts(3, prompt);
  std::vector<int32_t> host_counts(static_cast<size_t>(vocab), 0);
  for (int32_t t : prompt) host_counts[size_t(t)] = ops::kCountPromptBit;
  std::vector<int32_t> last(4, 0);
  int mismatches = 0, checked = 0;
  for (int step = 0; step < 24; ++step) {
    std::vector<rt::StepSeq> seqs;
    std::vector<int32_t> one(4);
    for (int s = 0; s < 4; ++s) {
      one[size_t(s)] = last[size_t(s)];
      if (step == 0) seqs.push_back({s, 0, prompt});
      else seqs.push_back({s, int(prompt.size()) + step - 1, std::span<const int32_t>(&one[size_t(s)], 1)});
    }
    std::vector<float> logits(size_t(4) * size_t(vocab));
    g.runner->Step(seqs, logits);
    for (auto& r : rows) r.step = uint32_t(step);
    std::vector<int32_t> got(4);
    std::vector<float> got_lp(4);
    g.runner->Sample(rows, got, got_lp);
    // The reference on the read-back logits (the device's bf16 values, exact in f32).
    Tensor rows_t(DType::kI32, {4, ops::kSampleRowWords}), tok(DType::kI32, {4}), lp(DType::kF32, {4});
    std::vector<ops::SampleRow> host_rows = rows;
    host_rows[3].counts_row = 0;
    std::memcpy(rows_t.data<int32_t>(), host_rows.data(), host_rows.size() * sizeof host_rows[0]);
    Tensor counts(DType::kI32, {1, vocab});
    std::memcpy(counts.data<int32_t>(), host_counts.data(), host_counts.size() * 4);
    ops::RunWith(*ops::Registry::Global().table<ops::SampleParams>().Find("ref"),
                 ops::SampleParams{.logits = TensorView::Contiguous(logits.data(), DType::kF32, {4, vocab}),
                                   .rows = rows_t.view(), .token_counts = counts.view(),
                                   .tokens = tok.view(), .logprobs = lp.view(),
                                   .update_counts = true});
    for (int s = 0; s < 4; ++s) {
      ++checked;
      if (got[size_t(s)] != tok.data<int32_t>()[s]) ++mismatches;
      EXPECT_EQ(got[size_t(s)], tok.data<int32_t>()[s]) << "step " << step << " seq " << s;
      EXPECT_NEAR(got_lp[size_t(s)], lp.data<float>()[s], 1e-3f) << "step " << step << " seq " << s;
    }
    std::memcpy(host_counts.data(), counts.data<int32_t>(), host_counts.size() * 4);
    last = got;
  }
  std::printf("device sampling: %d/%d draws identical to the reference\n", checked - mismatches,
              checked);
}

// fp8 e4m3 weights against the same model's bf16 weights on the device (the same kernels
// otherwise), with a bound derived from e4m3 rounding; bf16 against HF's goldens.
//
// e4m3 keeps 3 mantissa bits: rounding to nearest leaves an error uniform in +-ulp/2 with
// ulp = 2^-3 |v| at most, so each quantized operand carries a relative rms error of at most
// kE4m3Rel = 2^-3 / sqrt(12) (~0.036). A projection output y = sum_i w_i x_i then carries
// independent errors of relative rms kE4m3Rel * sqrt(q) (q quantized operands per product:
// 1 for the weights alone at <= 4 rows, the GEMV path; 2 with e4m3 activations, cuBLASLt's fp8
// GEMM), relative to y's own spread. The logits sum the contributions of every fp8
// projection on the path (4 per layer: qkv, o, gate_up, down; the output head stays bf16) as
// a random walk, so rms(logits_fp8 - logits_bf16) / std(logits_bf16) is expected at most
//   predicted = kE4m3Rel * sqrt(q * 4 * num_layers)
// (0.18 for this 3-layer model's prompt rows, 0.12 for a decode row). The check allows 1.5x
// predicted on the rms (a wrong scale or layout moves the logits by about their std or more),
// and 6x predicted on the worst logit (a Gaussian's maximum over V entries is about
// sqrt(2 ln V) of its rms: 3.5 at this model's V = 512, 4.9 at 128K). Both measured ratios
// are printed.
TEST(GpuFp8Weights, LogitsStayNearTheBf16Logits) {
  ASSERT_GT(cuda::DeviceCount(), 0) << "no CUDA device: this test runs on the GPU machine";
  auto cases = testing::LoadGolden(kModel);
  ASSERT_FALSE(cases.empty());
  struct Logits { std::vector<float> prompt, decode; };  // per case
  std::vector<Logits> by_dtype[2];
  int num_layers = 0;
  for (int di = 0; di < 2; ++di) {
    const DType dt = di == 0 ? DType::kBF16 : DType::kF8E4M3;
    Placed g = Place(dt);
    num_layers = g.model->config().num_layers;
    const int vocab = g.model->config().vocab_size;
    for (const testing::GoldenCase& c : cases) {
      Logits l{std::vector<float>(size_t(vocab)), std::vector<float>(size_t(vocab))};
      rt::StepSeq s{0, 0, c.prompt};  // one step: n = prompt length rows (the cuBLASLt path)
      g.runner->Step(std::span<const rt::StepSeq>(&s, 1), l.prompt);
      rt::StepSeq d{0, int(c.prompt.size()), std::span<const int32_t>(&c.greedy[0], 1)};
      g.runner->Step(std::span<const rt::StepSeq>(&d, 1), l.decode);  // n = 1: the GEMV path
      by_dtype[di].push_back(std::move(l));
    }
  }
  // max |a - b| / std(b) and rms(a - b) / std(b).
  auto compare = [](const std::vector<float>& a, const std::vector<float>& b) {
    double mean = 0, var = 0, max_abs = 0, ss = 0;
    int finite = 0;
    for (float v : b) mean += v;
    mean /= double(b.size());
    for (float v : b) var += (v - mean) * (v - mean);
    const double sd = std::sqrt(var / double(b.size()));
    for (size_t i = 0; i < b.size(); ++i) {
      finite += std::isfinite(a[i]) ? 1 : 0;
      const double e = double(a[i]) - double(b[i]);
      max_abs = std::max(max_abs, std::fabs(e));
      ss += e * e;
    }
    EXPECT_EQ(finite, int(a.size())) << "non-finite logits";
    return std::pair{max_abs / sd, std::sqrt(ss / double(b.size())) / sd};
  };
  const double kE4m3Rel = 0.125 / std::sqrt(12.0);
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Logits& bf = by_dtype[0][ci];
    const Logits& f8 = by_dtype[1][ci];
    const auto [hf_max, hf_rms] = compare(bf.prompt, cases[ci].logits);
    EXPECT_LE(hf_max, 0.05) << "bf16 weights vs HF, case " << ci;
    std::printf("case %zu: bf16 prompt logits vs HF: max|diff|/std %.4f, rms %.4f\n", ci, hf_max, hf_rms);
    for (int q : {2, 1}) {  // prompt rows (e4m3 activations), then the decode row
      const bool prompt = q == 2;
      const double predicted = kE4m3Rel * std::sqrt(double(q * 4 * num_layers));
      const auto [mx, rms] = compare(prompt ? f8.prompt : f8.decode, prompt ? bf.prompt : bf.decode);
      EXPECT_LE(rms, 1.5 * predicted) << (prompt ? "prompt" : "decode") << " case " << ci;
      EXPECT_LE(mx, 6.0 * predicted) << (prompt ? "prompt" : "decode") << " case " << ci;
      std::printf("case %zu: fp8 vs bf16 %s logits: rms/std %.4f, max/std %.4f (predicted rms %.3f)\n",
                  ci, prompt ? "prompt" : "decode", rms, mx, predicted);
    }
  }
}

}  // namespace
}  // namespace pg
