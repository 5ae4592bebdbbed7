// The llama family on the GPU (CUDA builds; run on the H200 by tools/gpu/dense.sh):
// bf16 weights and activations on the device, paged bf16 KV in the runner's arena, decode
// through CUDA graphs. Oracle: Hugging Face transformers' float32 goldens (the same files as
// model_golden_test.cpp), held to bf16 tolerances:
//  * logits after the prompt (chunked eager prefill) within max|diff| / std(hf) <= tol;
//  * teacher-forced decode through the graphs: at each of the 64 golden steps our argmax is
//    HF's token, except where HF's own top-1 margin is below twice the logit error we
//    measured (a near-tie that bf16 may flip);
//  * free-running greedy through the graphs is identical up to its first difference, and that
//    difference is at such a near-tie.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "kernels/cuda/common/context.h"
#include "models/loader.h"
#include "golden_util.h"
#include "hf_to_deepseek2_gguf.h"
#include "hf_to_gguf.h"
#include "models/model.h"
#include "runtime/cuda/gpu_prefill_bench.h"
#include "runtime/cuda/gpu_runner.h"
#include "runtime/sequence_runner.h"

namespace pg {
namespace {

namespace rt = runtime::cuda;

using testing::GoldenCase;
using testing::LoadGolden;

int32_t Argmax(std::span<const float> v) {
  return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

struct GpuModel {
  std::unique_ptr<rt::GpuRunner> runner;
  std::unique_ptr<models::Model> model;
};

constexpr int kMaxContext = 256;  // tokens per sequence, unless a golden case needs more
// MoE models: an expert choice whose f32 routing margin (models::RoutingMargin, choice scores
// of order 1) is below this may flip under bf16 activations; a token mismatch right after
// such a choice is a routing near-tie, not an error (the host f32 path is the oracle: it
// matches HF's logits to 1e-4, moe_golden_test.cpp).
constexpr float kRoutingTie = 0.01f;

// The routing margin of the token whose logits predict greedy[t]: the host f32 model run on
// the prompt and greedy[0, t). +inf for dense models.
float HostRoutingMargin(models::Model& host, std::span<const int32_t> prompt,
                        std::span<const int32_t> greedy, size_t t) {
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  seq.insert(seq.end(), greedy.begin(), greedy.begin() + std::ptrdiff_t(t));
  runtime::SequenceRunner runner(host, {.max_context = std::max(kMaxContext, int(seq.size())),
                                        .page_size = 16,
                                        .prefill_chunk = 64});
  runner.Append(seq);
  return host.last_routing_margin();
}
constexpr int kPrefillChunk = 37;  // awkward: prompts span several chunks and partial pages

// Context for a model's golden cases: kMaxContext, or the longest prompt + greedy tokens
// rounded up to a page (tiny-llama-hd128's 300-token prompt + 64 tokens).
int ContextFor(const std::vector<GoldenCase>& cases) {
  size_t need = 0;
  for (const GoldenCase& c : cases) need = std::max(need, c.prompt.size() + c.greedy.size());
  return std::max(kMaxContext, int((need + 15) / 16 * 16));
}

GpuModel Place(const std::string& path, DType kv_dtype = DType::kBF16,
               int max_context = kMaxContext) {
  GpuModel g;
  g.runner = std::make_unique<rt::GpuRunner>(rt::GpuRunnerOptions{
      .gpu_memory_utilization = 0.5, .max_batch_tokens = 64, .page_size = 16, .kv_dtype = kv_dtype});
  g.model = models::LoadModel({.path = path});
  g.model->PlaceOnDevice(g.runner->memory(), {.max_batch_tokens = 64});
  g.runner->Attach(*g.model);
  g.runner->ConfigureKv(/*num_slots=*/3, max_context);
  // Graphs for padded sizes 1 and 3 (two sequences run in the size-3 graph with one padding
  // row), covering every length of this context.
  const int sizes[] = {1, 3};
  g.runner->CaptureDecode(sizes, max_context);
  return g;
}

// Prefills `prompt` into `slot` in chunks; returns the logits after its last token.
std::vector<float> Prefill(rt::GpuRunner& r, int vocab, int slot, std::span<const int32_t> prompt) {
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (size_t at = 0; at < prompt.size(); at += kPrefillChunk) {
    const size_t len = std::min<size_t>(kPrefillChunk, prompt.size() - at);
    rt::StepSeq s{slot, int(at), prompt.subspan(at, len)};
    r.Step(std::span<const rt::StepSeq>(&s, 1), logits);
  }
  return logits;
}

// `shallow_tol`: the logit tolerance (max|diff| / std(HF)) of a model of up to 3 layers. Deeper
// models get it scaled by sqrt(layers / 3): each layer adds its own bf16 rounding (weights,
// activations, residual stream), independent errors that add in quadrature. Derived from the
// depth alone, before seeing a deep model's result (SmolLM2, 30 layers: 0.05 -> 0.158).
double DepthTolerance(float shallow_tol, int num_layers) {
  return shallow_tol * std::sqrt(std::max(num_layers, 3) / 3.0);
}

void CheckModel(const std::string& path, const std::string& golden_dir, float shallow_tol,
                DType kv_dtype = DType::kBF16) {
  ASSERT_GT(cuda::DeviceCount(), 0) << "no CUDA device: this test runs on the GPU machine";
  auto cases = LoadGolden(golden_dir);
  ASSERT_FALSE(cases.empty());
  GpuModel g = Place(path, kv_dtype, ContextFor(cases));
  const int vocab = g.model->config().vocab_size;
  const double tol_over_std = DepthTolerance(shallow_tol, g.model->config().num_layers);
  auto host = models::LoadModel({.path = path});  // f32 oracle of routing near-ties
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const GoldenCase& c = cases[ci];
    ASSERT_EQ(int(c.logits.size()), vocab);
    // 1. Logits after the prompt.
    std::vector<float> logits = Prefill(*g.runner, vocab, 0, c.prompt);
    double mean = 0, var = 0, max_abs = 0;
    for (float v : c.logits) mean += v;
    mean /= double(vocab);
    for (float v : c.logits) var += (v - mean) * (v - mean);
    const double sd = std::sqrt(var / double(vocab));
    for (int i = 0; i < vocab; ++i)
      max_abs = std::max(max_abs, std::fabs(double(logits[size_t(i)]) - double(c.logits[size_t(i)])));
    EXPECT_LE(max_abs / sd, tol_over_std)
        << golden_dir << " case " << ci << ": max |diff| " << max_abs << ", logit std " << sd
        << " (tolerance " << tol_over_std << " for " << g.model->config().num_layers << " layers)";
    const double tie = 2.0 * max_abs;
    // 2. Teacher-forced decode through the graphs.
    int mismatches = 0, near_ties = 0, routing_ties = 0;
    std::vector<float> step_logits = logits;
    for (size_t t = 0; t < c.greedy.size(); ++t) {
      const int32_t ours = Argmax(step_logits);
      if (ours != c.greedy[t]) {
        ++mismatches;
        const float routing =
            c.margins[t] < tie ? 0.0f : HostRoutingMargin(*host, c.prompt, c.greedy, t);
        if (c.margins[t] >= tie && routing < kRoutingTie) ++routing_ties;
        EXPECT_TRUE(c.margins[t] < tie || routing < kRoutingTie)
            << golden_dir << " case " << ci << " step " << t << ": ours " << ours << ", HF "
            << c.greedy[t] << " with margin " << c.margins[t] << ", f32 routing margin "
            << routing;
      }
      if (c.margins[t] < tie) ++near_ties;
      if (t + 1 == c.greedy.size()) break;
      rt::StepSeq s{0, int(c.prompt.size() + t), std::span<const int32_t>(&c.greedy[t], 1)};
      g.runner->Decode(std::span<const rt::StepSeq>(&s, 1), step_logits);
    }
    // 3. Free-running greedy through the graphs (re-prefilled: the slot's tail is rewritten).
    std::vector<float> fl = Prefill(*g.runner, vocab, 0, c.prompt);
    std::vector<int32_t> out;
    for (size_t t = 0; t < c.greedy.size(); ++t) {
      out.push_back(Argmax(fl));
      if (t + 1 == c.greedy.size()) break;
      rt::StepSeq s{0, int(c.prompt.size() + t), std::span<const int32_t>(&out.back(), 1)};
      g.runner->Decode(std::span<const rt::StepSeq>(&s, 1), fl);
    }
    size_t first_diff = 0;
    while (first_diff < out.size() && out[first_diff] == c.greedy[first_diff]) ++first_diff;
    if (first_diff < out.size() && c.margins[first_diff] >= tie) {
      const float routing = HostRoutingMargin(*host, c.prompt, c.greedy, first_diff);
      EXPECT_LT(routing, kRoutingTie) << golden_dir << " case " << ci
                                      << ": free-running greedy diverged at " << first_diff
                                      << " (HF margin " << c.margins[first_diff] << ")";
    }
    std::printf("%s case %zu (prompt %zu): logits max|diff|/std %.4f; teacher-forced %d/%zu "
                "mismatches (%d HF near-ties < %.4f; %d at f32 routing margins < %.2f); greedy "
                "identical for %zu/%zu\n",
                golden_dir.c_str(), ci, c.prompt.size(), max_abs / sd, mismatches,
                c.greedy.size(), near_ties, tie, routing_ties, kRoutingTie, first_diff,
                out.size());
  }
}

TEST(GpuModelGolden, TinyLlama) {
  CheckModel("tests/data/models/tiny-llama", "tests/data/models/tiny-llama", 0.05f);
}

// head_dim 128: the only shape the tensor-core prefill kernels (wgmma on sm_90, mma.sync)
// take, so this is the model-level check of those kernels; prompts of 1, 100 and 300 tokens
// (300 spans three 128-row query tiles and three key tiles).
TEST(GpuModelGolden, TinyLlamaHd128) {
  CheckModel("tests/data/models/tiny-llama-hd128", "tests/data/models/tiny-llama-hd128", 0.05f);
}

// Logits of one golden case on the device: after the prompt, then after each teacher-forced
// decode step along HF's greedy tokens (through the graphs).
std::vector<std::vector<float>> TeacherForcedLogits(GpuModel& g, const GoldenCase& c) {
  const int vocab = g.model->config().vocab_size;
  std::vector<std::vector<float>> steps{Prefill(*g.runner, vocab, 0, c.prompt)};
  for (size_t t = 0; t + 1 < c.greedy.size(); ++t) {
    std::vector<float> l(static_cast<size_t>(vocab));
    rt::StepSeq s{0, int(c.prompt.size() + t), std::span<const int32_t>(&c.greedy[t], 1)};
    g.runner->Decode(std::span<const rt::StepSeq>(&s, 1), l);
    steps.push_back(std::move(l));
  }
  return steps;
}

// fp8 e4m3 KV cache (scales 1) against the bf16 KV cache, both on the device (the HF golden
// check stays on the bf16 path: TinyLlama above). The two runs differ only in the cached k
// and v: e4m3 keeps 3 mantissa bits, so RNE leaves each stored value within u = 2^-4 of its
// bf16 value (relative; uniformly spread: rms u / sqrt(3). tiny-llama's k and v are about
// N(0, 0.9): the subnormals below 2^-6 are ~1% of them). An attention output moves by that
// twice over (the values directly; the keys through the softmax weights, logits of std <~ 1),
// rms 2u / sqrt(3) relative; a later layer carries an earlier layer's change on with gain
// about 1 (RMSNorm keeps relative changes) and adds its own, so over L layers the final hidden
// state, and the logits (a linear map of it), move by at most e = L * 2u / sqrt(3) of their
// std in rms (linear sum: no cancellation assumed), 0.217 for tiny-llama's 3 layers; the
// largest of V such errors is at most sqrt(2 ln V) e (Gaussian maximum). Checked after the
// prompt and at every teacher-forced step; the greedy token is the bf16 one unless bf16's own
// top-1 margin is below twice the step's max|diff| (a near-tie).
TEST(GpuModelGolden, TinyLlamaFp8Kv) {
  ASSERT_GT(cuda::DeviceCount(), 0) << "no CUDA device: this test runs on the GPU machine";
  const std::string path = "tests/data/models/tiny-llama";
  const auto cases = LoadGolden(path);
  ASSERT_FALSE(cases.empty());
  std::vector<std::vector<std::vector<float>>> bf16, fp8;  // [case][step][vocab]
  int layers = 0;
  {
    GpuModel g = Place(path, DType::kBF16);
    layers = g.model->config().num_layers;
    for (const GoldenCase& c : cases) bf16.push_back(TeacherForcedLogits(g, c));
  }
  {
    GpuModel g = Place(path, DType::kF8E4M3);
    for (const GoldenCase& c : cases) fp8.push_back(TeacherForcedLogits(g, c));
  }
  const double rms_bound = layers * 2.0 / 16 / std::sqrt(3.0);
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    double worst = 0, worst_rms = 0;
    int flips = 0;
    ASSERT_EQ(bf16[ci].size(), fp8[ci].size());
    for (size_t t = 0; t < bf16[ci].size(); ++t) {
      const std::vector<float>& ref = bf16[ci][t];
      const std::vector<float>& got = fp8[ci][t];
      double mean = 0, var = 0, max_abs = 0, sq = 0;
      for (float v : ref) mean += v;
      mean /= double(ref.size());
      for (float v : ref) var += (v - mean) * (v - mean);
      const double sd = std::sqrt(var / double(ref.size()));
      for (size_t i = 0; i < ref.size(); ++i) {
        const double d = double(got[i]) - double(ref[i]);
        max_abs = std::max(max_abs, std::fabs(d));
        sq += d * d;
      }
      const double rms = std::sqrt(sq / double(ref.size()));
      const double max_bound = std::sqrt(2.0 * std::log(double(ref.size()))) * rms_bound;
      worst = std::max(worst, max_abs / sd), worst_rms = std::max(worst_rms, rms / sd);
      EXPECT_LE(rms / sd, rms_bound) << "case " << ci << " step " << t << ": rms diff " << rms
                                     << ", bf16 logit std " << sd;
      EXPECT_LE(max_abs / sd, max_bound) << "case " << ci << " step " << t << ": max |diff| "
                                         << max_abs << ", bf16 logit std " << sd;
      std::vector<float> sorted = ref;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      const double margin = double(sorted[0]) - double(sorted[1]);
      if (Argmax(got) != Argmax(ref)) {
        ++flips;
        EXPECT_LT(margin, 2 * max_abs) << "case " << ci << " step " << t << ": fp8 token "
                                       << Argmax(got) << ", bf16 " << Argmax(ref)
                                       << " with bf16 margin " << margin;
      }
    }
    std::printf("tiny-llama fp8 vs bf16 KV case %zu: worst rms diff/std %.4f (bound %.4f), worst "
                "max|diff|/std %.4f (bound %.4f) over %zu steps; %d greedy flips (at bf16 "
                "near-ties)\n",
                ci, worst_rms, rms_bound, worst,
                std::sqrt(2.0 * std::log(double(bf16[ci][0].size()))) * rms_bound,
                bf16[ci].size(), flips);
  }
}

TEST(GpuModelGolden, TinyQwen3) {
  CheckModel("tests/data/models/tiny-qwen3", "tests/data/models/tiny-qwen3", 0.05f);
}

TEST(GpuModelGolden, SmolLM2Gguf) {
  // Relative to the working directory first: on the GPU machine the repo is not at the
  // source path compiled into EmbeddedModelPath(); tools/gpu/dense.sh reassembles the GGUF
  // there from the pieces `dense.sh --pack` cuts with SMOL_PARTS (.xfer/m<i>/smol.<i>, one per
  // back-to-back device call: 4 pieces once the tree is ~28 MB of the 64 MiB a call carries)
  // and runs this test only then.
  std::string path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) path = models::EmbeddedModelPath();
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " missing (tools/gpu/dense.sh "
                                                        "reassembles it from .xfer/m1 + .xfer/m2)";
  CheckModel(path, "tests/data/models/smollm2", 0.05f);  // 30 layers: 0.158
}

// The MoE architectures (issue 7): routed experts (softmax top-k / DeepSeek's grouped sigmoid
// top-k with bias), shared experts, MLA over the latent paged KV (expanded prefill, absorbed
// decode in the graphs), fp8 128x128 block-scaled weights kept fp8 on the device.
TEST(GpuModelGolden, TinyQwen3Moe) {
  CheckModel("tests/data/models/tiny-qwen3-moe", "tests/data/models/tiny-qwen3-moe", 0.05f);
}
// The same checkpoint as a llama.cpp GGUF (hf_to_gguf.h; bf16 as stored, experts stacked):
// placed through the GGUF MoE loader's views, the same HF goldens.
TEST(GpuModelGolden, TinyQwen3MoeGguf) {
  const std::string gguf = testing::TinyQwen3MoeGguf();
  CheckModel(gguf, "tests/data/models/tiny-qwen3-moe", 0.05f);
  std::filesystem::remove(gguf);
}

TEST(GpuModelGolden, TinyDeepseekV3) {
  CheckModel("tests/data/models/tiny-deepseek-v3", "tests/data/models/tiny-deepseek-v3", 0.05f);
}

// The same checkpoint as a llama.cpp deepseek2 GGUF (hf_to_deepseek2_gguf.h; split attn_k_b /
// attn_v_b, as llama.cpp's converter writes them now): kv_b joined back on the host, then placed
// like the safetensors copy; the same HF goldens.
TEST(GpuModelGolden, TinyDeepseekV3Deepseek2Gguf) {
  const std::string gguf = testing::TinyDeepseek2Gguf(testing::KvBForm::kSplit);
  CheckModel(gguf, "tests/data/models/tiny-deepseek-v3", 0.05f);
  std::filesystem::remove(gguf);
}

TEST(GpuModelGolden, TinyDeepseekV3Fp8) {
  CheckModel("tests/data/models/tiny-deepseek-v3-fp8", "tests/data/models/tiny-deepseek-v3-fp8",
             0.05f);
}

// The same architecture with the latent dims the fast CUDA MLA kernels are compiled for
// (kv_lora_rank 512, rope 64; the tiny models above run the scalar fallback).
TEST(GpuModelGolden, TinyDeepseekV3Mla512) {
  CheckModel("tests/data/models/tiny-deepseek-v3-mla512",
             "tests/data/models/tiny-deepseek-v3-mla512", 0.05f);
}

TEST(GpuModelGolden, TinyDeepseekV3Mla512Fp8) {
  CheckModel("tests/data/models/tiny-deepseek-v3-mla512-fp8",
             "tests/data/models/tiny-deepseek-v3-mla512-fp8", 0.05f);
}

// Two sequences in one padded decode graph (size 3: one padding row) give each the logits
// it gets alone: slots do not leak into each other.
TEST(GpuRunner, BatchedDecodeMatchesSingle) {
  ASSERT_GT(cuda::DeviceCount(), 0);
  GpuModel g = Place("tests/data/models/tiny-llama");
  const int vocab = g.model->config().vocab_size;
  const std::vector<int32_t> a = {5, 77, 301, 12, 9, 440, 3, 18, 250, 71, 66},
                             b = {400, 2, 2, 17, 99, 123, 311, 8, 41, 500, 1, 7, 7, 90, 33, 64, 201};
  Prefill(*g.runner, vocab, 0, a);
  Prefill(*g.runner, vocab, 1, b);
  const int32_t ta = 42, tb = 317;
  rt::StepSeq both[] = {{0, int(a.size()), std::span<const int32_t>(&ta, 1)},
                        {1, int(b.size()), std::span<const int32_t>(&tb, 1)}};
  std::vector<float> batched(2 * static_cast<size_t>(vocab)), single(static_cast<size_t>(vocab));
  g.runner->Decode(both, batched);
  // Alone (graph of size 1), the same writes again: same positions, same values.
  g.runner->Decode(std::span<const rt::StepSeq>(&both[1], 1), single);
  double max_diff = 0;
  for (int i = 0; i < vocab; ++i)
    max_diff = std::max(max_diff, double(std::fabs(single[size_t(i)] - batched[size_t(vocab + i)])));
  EXPECT_LE(max_diff, 0.02) << "slot 1 alone vs batched";
  // And the two rows differ (different histories): the batch really carries two sequences.
  double row_diff = 0;
  for (int i = 0; i < vocab; ++i)
    row_diff = std::max(row_diff, double(std::fabs(batched[size_t(i)] - batched[size_t(vocab + i)])));
  EXPECT_GT(row_diff, 0.1);
}

// Decode graphs captured per kv bucket (16, 64 and the full 256) replay the set of the
// shortest bucket that holds the step and give the logits an eager step gives at that position
// (each bucket's plan is a different split layout: same values within bf16 sum-order noise).
TEST(GpuRunner, KvBucketGraphsMatchEager) {
  ASSERT_GT(cuda::DeviceCount(), 0);
  GpuModel g = Place("tests/data/models/tiny-llama");
  const int sizes[] = {1, 3}, buckets[] = {64, 16, 999};  // unsorted; >= max ignored
  g.runner->CaptureDecode(sizes, kMaxContext, buckets);
  EXPECT_EQ(g.runner->decode_kv_buckets(), (std::vector<int>{16, 64, kMaxContext}));
  const int vocab = g.model->config().vocab_size;
  std::vector<int32_t> prompt(10);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 37 + 5) % vocab);
  Prefill(*g.runner, vocab, 0, prompt);
  std::vector<float> graph(static_cast<size_t>(vocab)), eager(static_cast<size_t>(vocab));
  int pos = int(prompt.size());
  for (int target : {12, 15, 16, 40, 63, 64, 100, 200}) {  // around each bucket's edge
    for (; pos < target; ++pos) {  // grow the sequence eagerly to target tokens
      const int32_t t = int32_t((pos * 13 + 1) % vocab);
      rt::StepSeq s{0, pos, std::span<const int32_t>(&t, 1)};
      g.runner->Step(std::span<const rt::StepSeq>(&s, 1), eager);
    }
    const int32_t t = int32_t((pos * 13 + 1) % vocab);
    rt::StepSeq s{0, pos, std::span<const int32_t>(&t, 1)};  // kv length pos + 1
    g.runner->Decode(std::span<const rt::StepSeq>(&s, 1), graph);
    g.runner->Step(std::span<const rt::StepSeq>(&s, 1), eager);  // same slot, same values
    double max_diff = 0;
    for (int i = 0; i < vocab; ++i)
      max_diff = std::max(max_diff, double(std::fabs(graph[size_t(i)] - eager[size_t(i)])));
    EXPECT_LE(max_diff, 0.02) << "kv length " << pos + 1;
    ++pos;
  }
}

TEST(GpuRunner, RequestsThatDoNotFitFailAlone) {
  ASSERT_GT(cuda::DeviceCount(), 0);
  GpuModel g = Place("tests/data/models/tiny-llama");
  const int vocab = g.model->config().vocab_size;
  const int32_t bad = vocab + 3, ok = 7;
  std::vector<float> logits(static_cast<size_t>(vocab));
  rt::StepSeq s{0, 0, std::span<const int32_t>(&bad, 1)};
  try {
    g.runner->Step(std::span<const rt::StepSeq>(&s, 1), logits);
    ADD_FAILURE() << "out-of-vocab id accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfRange) << e.what();
  }
  rt::StepSeq late{0, kMaxContext, std::span<const int32_t>(&ok, 1)};
  EXPECT_THROW(g.runner->Decode(std::span<const rt::StepSeq>(&late, 1), logits), Error);
  // A KV layout larger than the arena is refused with kResourceExhausted, then a fitting one
  // still works.
  try {
    g.runner->ConfigureKv(1 << 20, 1 << 20);
    ADD_FAILURE() << "absurd KV layout accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted) << e.what();
  }
  g.runner->ConfigureKv(1, 64);
  rt::StepSeq fine{0, 0, std::span<const int32_t>(&ok, 1)};
  g.runner->Step(std::span<const rt::StepSeq>(&fine, 1), logits);
  EXPECT_TRUE(std::isfinite(logits[0]));
}

// The prefill benchmark's FLOP model (pure arithmetic, no device): a prompt cut into chunks
// costs what the whole prompt costs plus one lm_head row per extra step, and its attention
// term is the causal sum 4 · layers · heads · head_dim · n (n + 1) / 2.
TEST(GpuPrefillBench, FlopModelIsAdditiveOverChunks) {
  const rt::PrefillFlopShape s{.linear_params_per_token = 6.979e9, .vocab = 128256,
                               .hidden = 4096, .layers = 32, .heads = 32, .head_dim = 128};
  const int64_t n = 32768, chunk = 8192;
  const double whole = rt::PrefillFlops(s, 0, n, 1);
  double chunked = 0;
  for (int64_t at = 0; at < n; at += chunk) chunked += rt::PrefillFlops(s, at, chunk, 1);
  const double lm_row = 2.0 * 128256 * 4096;
  EXPECT_NEAR(chunked, whole + 3 * lm_row, whole * 1e-12);
  const double attention = whole - 2.0 * 6.979e9 * n - lm_row;
  EXPECT_NEAR(attention, 4.0 * 32 * 32 * 128 * double(n) * double(n + 1) / 2, attention * 1e-12);
  // 800 tokens after a 50K prefix see the whole prefix: 800 · 50000 keys plus their own.
  const double ttft = rt::PrefillFlops(s, 50000, 800, 1) - 2.0 * 6.979e9 * 800 - lm_row;
  EXPECT_NEAR(ttft, 4.0 * 32 * 32 * 128 * (800.0 * 50000 + 800.0 * 801 / 2), ttft * 1e-12);
}

}  // namespace
}  // namespace pg
