// The sampler against closed-form expectations: which tokens each filter keeps, the draw
// frequencies they imply, penalties, logprobs, and seeding.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "runtime/sampler.h"

namespace pg::runtime {
namespace {

// Logits whose softmax at temperature 1 is exactly `probs` (up to normalisation).
std::vector<float> LogitsFor(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(p > 0 ? float(std::log(p)) : -1e30f);
  return l;
}

std::map<int32_t, int> Draw(const std::vector<float>& logits, SamplingParams p, int n,
                            uint64_t seed = 1) {
  std::map<int32_t, int> counts;
  p.seed = seed;
  SamplerState st(p, {}, 0);
  for (int i = 0; i < n; ++i) {
    std::vector<float> l = logits;
    SampledToken t = Sample(l, st);
    ++counts[t.token];
  }
  return counts;
}

const std::vector<double> kProbs = {0.05, 0.40, 0.25, 0.15, 0.10, 0.05};

TEST(Sampler, GreedyTakesTheArgmax) {
  SamplingParams p;
  p.temperature = 0;
  auto c = Draw(LogitsFor(kProbs), p, 50);
  EXPECT_EQ(c.size(), 1u);
  EXPECT_EQ(c.begin()->first, 1);
}

TEST(Sampler, TemperatureOneFollowsTheDistribution) {
  SamplingParams p;
  const int n = 40000;
  auto c = Draw(LogitsFor(kProbs), p, n);
  for (size_t i = 0; i < kProbs.size(); ++i) {
    double f = double(c[int32_t(i)]) / n;
    double sd = std::sqrt(kProbs[i] * (1 - kProbs[i]) / n);
    EXPECT_NEAR(f, kProbs[i], 5 * sd) << "token " << i;
  }
}

TEST(Sampler, TopKTopPMinPKeepTheRightSets) {
  SamplingParams p;
  p.top_k = 2;  // {1, 2}: 0.40/0.65, 0.25/0.65
  auto c = Draw(LogitsFor(kProbs), p, 20000);
  EXPECT_EQ(c.size(), 2u);
  EXPECT_NEAR(double(c[1]) / 20000, 0.40 / 0.65, 0.02);
  p = {};
  p.top_p = 0.7f;  // sorted 0.40, 0.25 (0.65 < 0.7), 0.15 (0.80 >= 0.7): {1, 2, 3}
  c = Draw(LogitsFor(kProbs), p, 20000);
  EXPECT_EQ(c.size(), 3u);
  EXPECT_TRUE(c.count(1) && c.count(2) && c.count(3));
  EXPECT_NEAR(double(c[3]) / 20000, 0.15 / 0.80, 0.02);
  p = {};
  p.min_p = 0.3f;  // keep p >= 0.3 * 0.40 = 0.12: {1, 2, 3}
  c = Draw(LogitsFor(kProbs), p, 20000);
  EXPECT_EQ(c.size(), 3u);
  EXPECT_FALSE(c.count(4));
}

TEST(Sampler, LowTemperatureSharpens) {
  SamplingParams p;
  p.temperature = 0.25f;  // p^4 renormalised: token 1 = 0.0256 / (0.0256+0.0039+...) ~ 0.82
  auto c = Draw(LogitsFor(kProbs), p, 20000);
  double z = 0;
  for (double q : kProbs) z += std::pow(q, 4);
  EXPECT_NEAR(double(c[1]) / 20000, std::pow(0.40, 4) / z, 0.02);
}

TEST(Sampler, SameSeedSameOutputDifferentSeedDiffers) {
  SamplingParams p;
  auto a = Draw(LogitsFor(kProbs), p, 200, 7);
  auto b = Draw(LogitsFor(kProbs), p, 200, 7);
  EXPECT_EQ(a, b);
  // Sequences, not only counts.
  std::vector<int32_t> s1, s2, s3;
  for (auto [seed, out] : {std::pair{7ull, &s1}, {7ull, &s2}, {8ull, &s3}}) {
    SamplingParams q;
    q.seed = seed;
    SamplerState st(q, {}, 0);
    for (int i = 0; i < 64; ++i) {
      auto l = LogitsFor(kProbs);
      out->push_back(Sample(l, st).token);
    }
  }
  EXPECT_EQ(s1, s2);
  EXPECT_NE(s1, s3);
}

TEST(Sampler, PenaltiesFollowTheirDefinitions) {
  // Two tokens tied at logit 2; token 0 was generated twice.
  SamplingParams p;
  p.temperature = 0;
  p.frequency_penalty = 0.3f;
  p.presence_penalty = 0.1f;
  SamplerState st(p, {}, 0);
  st.Accept(0);
  st.Accept(0);
  std::vector<float> l = {2.0f, 1.5f, -1.0f};
  Sample(l, st);
  EXPECT_FLOAT_EQ(l[0], 2.0f - 0.1f - 2 * 0.3f);  // presence once + frequency per occurrence
  EXPECT_FLOAT_EQ(l[1], 1.5f);
  // Repetition penalty (HF): positive logits divided, negative multiplied; prompt counts.
  SamplingParams r;
  r.temperature = 0;
  r.repetition_penalty = 2.0f;
  std::vector<int32_t> prompt = {2};
  SamplerState st2(r, prompt, 0);
  st2.Accept(0);
  std::vector<float> l2 = {2.0f, 1.5f, -1.0f};
  SampledToken t = Sample(l2, st2);
  EXPECT_FLOAT_EQ(l2[0], 1.0f);
  EXPECT_FLOAT_EQ(l2[2], -2.0f);
  EXPECT_EQ(t.token, 1);  // 1.5 now beats the penalised 1.0
}

TEST(Sampler, LogprobsAreOfTheRawDistribution) {
  SamplingParams p;
  p.temperature = 0;
  p.top_logprobs = 3;
  SamplerState st(p, {}, 0);
  auto l = LogitsFor(kProbs);
  SampledToken t = Sample(l, st);
  EXPECT_EQ(t.token, 1);
  EXPECT_NEAR(t.logprob, std::log(0.40), 1e-5);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].first, 1);
  EXPECT_EQ(t.top[1].first, 2);
  EXPECT_EQ(t.top[2].first, 3);
  EXPECT_NEAR(t.top[2].second, std::log(0.15), 1e-5);
}

// logit_bias adds to the raw logits before everything else: -100 bans the favourite, +100 forces a
// rare token (its logprob stays the raw one), ln 2 doubles a token's weight in the draw.
TEST(Sampler, LogitBiasShiftsTheRawLogits) {
  SamplingParams p;
  p.temperature = 0;
  p.logit_bias = {{1, -100.0f}};
  auto banned = Draw(LogitsFor(kProbs), p, 20);
  EXPECT_EQ(banned, (std::map<int32_t, int>{{2, 20}}));

  p.logit_bias = {{5, 100.0f}};
  p.top_logprobs = 0;
  SamplerState st(p, {}, 0);
  auto l = LogitsFor(kProbs);
  SampledToken t = Sample(l, st);
  EXPECT_EQ(t.token, 5);
  EXPECT_NEAR(t.logprob, std::log(0.05), 1e-5);

  SamplingParams q;
  q.logit_bias = {{0, float(std::log(2.0))}, {99, 50.0f}};  // an id past the row: ignored
  const int n = 40000;
  auto c = Draw(LogitsFor(kProbs), q, n);
  const double want = 0.10 / 1.05;
  EXPECT_NEAR(double(c[0]) / n, want, 5 * std::sqrt(want * (1 - want) / n));
  EXPECT_NEAR(double(c[1]) / n, 0.40 / 1.05, 5 * std::sqrt(0.38 * 0.62 / n));
}

}  // namespace
}  // namespace pg::runtime
