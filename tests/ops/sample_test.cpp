// ops::Sample: every backend against ref/ token for token (the counter-based RNG makes a
// row's draw depend only on its seed and step), on awkward vocab sizes and every filter:
// greedy, temperature, top_k = 1 / small / large / vocab, top_p tiny / mid / near 1, min_p,
// penalties over token counts, bf16-representable logits with many ties; logprobs and count
// updates too.
// The reference itself is checked against closed-form frequencies in
// tests/unit/runtime/sampler_test.cpp (the host sampler runs the same ChooseToken).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>

#include "op_test_util.h"
#include "sample_oracle.h"

namespace pg::ops::testing {
namespace {

struct Case {
  std::string name;
  int64_t n, vocab;
  SampleRow row;          // every row gets this, with its own seed / step / counts row
  bool penalties = false; // token_counts filled and used (and updated)
  bool bf16_logits = false;
  bool logprobs = false;
  float logit_scale = 3.0f;  // logits ~ N(0, scale); bf16 rounding then makes ties
};

SampleRow Row(float t, int k, float top_p, float min_p) {
  SampleRow r;
  r.temperature = t, r.top_k = k, r.top_p = top_p, r.min_p = min_p;
  return r;
}

std::vector<Case> Cases() {
  std::vector<Case> c;
  for (int64_t vocab : {1, 7, 1000, 32003, 128256}) {
    const int64_t n = vocab >= 100000 ? 5 : 19;
    c.push_back({"greedy", n, vocab, Row(0.0f, 0, 1.0f, 0.0f)});
    c.push_back({"temperature", n, vocab, Row(0.8f, 0, 1.0f, 0.0f), false, false, true});
    c.push_back({"top_k=1", n, vocab, Row(1.0f, 1, 1.0f, 0.0f)});
    c.push_back({"top_k=40", n, vocab, Row(1.0f, 40, 1.0f, 0.0f), false, true});
    c.push_back({"top_k=vocab", n, vocab, Row(1.3f, int(vocab), 1.0f, 0.0f)});
    c.push_back({"top_p=0.9", n, vocab, Row(1.0f, 0, 0.9f, 0.0f), false, true, true});
    c.push_back({"top_p tiny", n, vocab, Row(1.0f, 0, 1e-6f, 0.0f)});
    c.push_back({"min_p=0.05", n, vocab, Row(0.7f, 0, 1.0f, 0.05f)});
    c.push_back({"all filters", n, vocab, Row(0.9f, 50, 0.8f, 0.02f), false, true});
    Case pen{"penalties", n, vocab, Row(1.0f, 0, 0.95f, 0.0f), true, true, true};
    pen.row.repetition_penalty = 1.3f, pen.row.presence_penalty = 0.5f;
    pen.row.frequency_penalty = 0.25f;
    c.push_back(pen);
    Case gp = pen;
    gp.name = "greedy penalties", gp.row.temperature = 0.0f;
    c.push_back(gp);
  }
  // The device kernel's cut paths (cuda/sampling/sample_cut.cuh): top-k beyond the shared
  // candidate capacity (1024) with and without top-p, top-p near 1, a low temperature
  // (most tokens in the histogram's last bin), Qwen's vocabulary.
  c.push_back({"top_k=2000 top_p=0.9", 5, 128256, Row(1.0f, 2000, 0.9f, 0.0f), false, true});
  c.push_back({"top_k=5000", 5, 128256, Row(1.0f, 5000, 1.0f, 0.0f), false, true});
  c.push_back({"top_p=0.99999", 5, 128256, Row(0.7f, 0, 0.99999f, 0.0f), false, true});
  c.push_back({"T=0.05 top_p=0.9", 5, 128256, Row(0.05f, 0, 0.9f, 0.0f)});
  c.push_back({"qwen top_p=0.9", 5, 151936, Row(0.8f, 0, 0.9f, 0.0f), false, true, true});
  c.push_back({"qwen all filters", 5, 151936, Row(0.9f, 50, 0.8f, 0.02f), false, true});
  // Flat logits (ties everywhere after bf16 rounding) and a peaked row.
  Case flat{"flat top_p", 7, 50000, Row(1.0f, 0, 0.5f, 0.0f), false, true, false, 0.05f};
  c.push_back(flat);
  Case flatk{"flat top_k", 7, 50000, Row(1.0f, 300, 1.0f, 0.0f), false, true, false, 0.05f};
  c.push_back(flatk);
  Case peak{"peaked", 7, 50000, Row(0.5f, 0, 0.99f, 0.1f), false, false, false, 20.0f};
  c.push_back(peak);
  return c;
}

struct Inputs {
  Tensor logits, rows, counts, tokens, logprobs;
};

Inputs MakeInputs(const Case& c) {
  Inputs in;
  in.logits = Tensor(DType::kF32, {c.n, c.vocab});
  FillNormal(in.logits, 0.0f, c.logit_scale);
  if (c.bf16_logits)  // the values a bf16 device tensor holds exactly
    for (int64_t i = 0; i < in.logits.numel(); ++i)
      in.logits.data<float>()[i] = Bf16ToF32(F32ToBf16(in.logits.data<float>()[i]));
  in.rows = Tensor(DType::kI32, {c.n, kSampleRowWords});
  for (int64_t r = 0; r < c.n; ++r) {
    SampleRow row = c.row;
    const uint64_t seed = uint64_t(RandInt(0, 1ll << 40));
    row.seed_lo = uint32_t(seed), row.seed_hi = uint32_t(seed >> 32);
    row.step = uint32_t(RandInt(0, 1000));
    row.counts_row = c.penalties ? int32_t(c.n - 1 - r) : -1;  // not the identity map
    std::memcpy(in.rows.data<int32_t>() + r * kSampleRowWords, &row, sizeof row);
  }
  if (c.penalties) {
    in.counts = Tensor(DType::kI32, {c.n, c.vocab});
    int32_t* p = in.counts.data<int32_t>();
    for (int64_t i = 0; i < in.counts.numel(); ++i) {
      const int64_t roll = RandInt(0, 9);  // ~30% in the prompt, ~20% generated 1-3 times
      p[i] = (roll < 3 ? kCountPromptBit : 0) + (roll >= 8 ? int32_t(RandInt(1, 3)) * 2 : 0);
    }
  }
  in.tokens = Tensor(DType::kI32, {c.n});
  in.logprobs = Tensor(DType::kF32, {c.n});
  return in;
}

SampleParams Params(const Case& c, const Inputs& in, const Tensor& counts, const Tensor& tokens,
                    const Tensor& logprobs) {
  SampleParams p;
  p.logits = in.logits.view();
  p.rows = in.rows.view();
  if (c.penalties) p.token_counts = counts.view(), p.update_counts = true;
  p.tokens = tokens.view();
  if (c.logprobs) p.logprobs = logprobs.view();
  return p;
}

Tensor CopyOf(const Tensor& t) {
  if (!t.data<void>()) return Tensor();
  Tensor c(t.dtype(), t.view().shape.data(), t.view().ndim);
  std::memcpy(c.data<void>(), t.data<void>(), size_t(t.nbytes()));
  return c;
}

#if defined(PEREGRINE_HAVE_CUDA)
// The op's params on the device: logits as f32 or (bf16 cases) bf16 bytes of the same values.
struct DeviceSample {
  DeviceMirror m;
  Tensor logits_bf16;
  SampleParams d;
  DeviceSample(const Case& c, const SampleParams& p) {
    d = p;
    if (c.bf16_logits) {
      logits_bf16 = Tensor(DType::kBF16, p.logits.shape.data(), p.logits.ndim);
      for (int64_t i = 0; i < p.logits.numel(); ++i)
        logits_bf16.data<uint16_t>()[i] = F32ToBf16(p.logits.as<float>()[i]);
      d.logits = m.Raw(logits_bf16.view());
    } else {
      d.logits = m.Raw(p.logits);
    }
    d.rows = m.Raw(p.rows);
    d.token_counts = p.token_counts.data ? m.RawOut(p.token_counts) : TensorView{};
    d.tokens = m.RawOut(p.tokens);
    d.logprobs = p.logprobs.data ? m.RawOut(p.logprobs) : TensorView{};
  }
};
#endif

// Runs backend k on host params p (device backends through a mirror); false: not capable.
bool RunSampleBackend(const KernelImpl<SampleParams>& k, const Case& c, const SampleParams& p) {
  if (k.device == Device::kCpu) {
    if (!Accepts(k, p)) return false;
    RunWith(k, p);
    return true;
  }
#if defined(PEREGRINE_HAVE_CUDA)
  DeviceSample ds(c, p);
  if (!Accepts(k, ds.d)) return false;
  RunWith(k, ds.d);
  ds.m.CopyBack();
  return true;
#else
  (void)c;
  ADD_FAILURE() << k.backend << ": a device backend in a build without its device";
  return false;
#endif
}

TEST(SampleOp, EveryBackendDrawsTheReferenceTokens) {
  PG_SEED_TRACE();
  Coverage cov;
  for (const Case& c : Cases()) {
    const std::string what = fmt::format("{} n={} vocab={}", c.name, c.n, c.vocab);
    SCOPED_TRACE(what);
    Inputs in = MakeInputs(c);
    Tensor ref_counts = CopyOf(in.counts), ref_tokens(DType::kI32, {c.n}),
           ref_lp(DType::kF32, {c.n});
    RunWith(RefImpl<SampleParams>(), Params(c, in, ref_counts, ref_tokens, ref_lp));
    for (int64_t r = 0; r < c.n; ++r) {
      const int32_t t = ref_tokens.data<int32_t>()[r];
      ASSERT_TRUE(t >= 0 && t < c.vocab) << "ref token " << t;
    }
    for (const KernelImpl<SampleParams>* k : Backends<SampleParams>()) {
      Tensor counts = CopyOf(in.counts), tokens(DType::kI32, {c.n}), lp(DType::kF32, {c.n});
      if (!RunSampleBackend(*k, c, Params(c, in, counts, tokens, lp))) continue;
      cov.Ran(k->backend);
      for (int64_t r = 0; r < c.n; ++r)
        EXPECT_EQ(tokens.data<int32_t>()[r], ref_tokens.data<int32_t>()[r])
            << k->backend << " row " << r;
      if (c.logprobs) {
        for (int64_t r = 0; r < c.n; ++r) {
          EXPECT_NEAR(lp.data<float>()[r], ref_lp.data<float>()[r], 1e-4f)
              << k->backend << " logprob row " << r;
        }
      }
      if (c.penalties) {
        EXPECT_EQ(std::memcmp(counts.data<int32_t>(), ref_counts.data<int32_t>(),
                              size_t(counts.nbytes())),
                  0)
            << k->backend << ": token counts after the update differ";
      }
    }
  }
  cov.Check<SampleParams>();
}

// The filters keep what they promise (checked on the reference's draws over many steps).
TEST(SampleOp, ReferenceRespectsTheFilters) {
  const int64_t vocab = 1000;
  Tensor logits(DType::kF32, {1, vocab});
  FillNormal(logits, 0.0f, 2.0f);
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const float* l = logits.data<float>();
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  std::vector<int32_t> rank(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) rank[size_t(order[size_t(i)])] = int32_t(i);
  Tensor rows(DType::kI32, {1, kSampleRowWords}), tok(DType::kI32, {1});
  auto draw = [&](SampleRow row, uint32_t step) {
    row.step = step;
    std::memcpy(rows.data<int32_t>(), &row, sizeof row);
    Sample({.logits = logits.view(), .rows = rows.view(), .tokens = tok.view()});
    return tok.data<int32_t>()[0];
  };
  for (uint32_t s = 0; s < 300; ++s) {
    EXPECT_LT(rank[size_t(draw(Row(1.0f, 5, 1.0f, 0.0f), s))], 5);
    EXPECT_EQ(draw(Row(1.0f, 0, 1e-6f, 0.0f), s), order[0]);
    EXPECT_EQ(draw(Row(0.0f, 0, 1.0f, 0.0f), s), order[0]);
    // min_p = 1 keeps the top token only.
    EXPECT_EQ(draw(Row(1.0f, 0, 1.0f, 1.0f), s), order[0]);
  }
  // Same (seed, step) -> same token; the draws vary with the step.
  std::set<int32_t> seen;
  for (uint32_t s = 0; s < 50; ++s) {
    EXPECT_EQ(draw(Row(1.0f, 0, 1.0f, 0.0f), s), draw(Row(1.0f, 0, 1.0f, 0.0f), s));
    seen.insert(draw(Row(1.0f, 0, 1.0f, 0.0f), s));
  }
  EXPECT_GT(seen.size(), 5u);
}

TEST(SampleOp, ChooseTokenEqualsSortingTheWholeVocabulary) {
  std::mt19937 rng(11);
  int cases = 0;
  for (int vocab : {1, 2, 17, 1000, 49152}) {
    for (int trial = 0; trial < (vocab > 10000 ? 60 : 400); ++trial) {
      std::normal_distribution<float> normal(0.0f, trial % 3 == 0 ? 1.0f : 4.0f);
      std::vector<float> x(static_cast<size_t>(vocab), 0.0f);
      for (float& v : x) v = normal(rng);
      if (trial % 4 == 1)  // ties (bf16-like rounding)
        for (float& v : x) v = std::round(v * 4.0f) / 4.0f;
      if (trial % 4 == 2 && vocab > 1)  // a mask: most tokens at -inf
        for (size_t i = 0; i < x.size(); ++i)
          if (rng() % 8 != 0 && i != size_t(trial) % x.size()) x[i] = -std::numeric_limits<float>::infinity();
      const float top_ps[] = {1.0f, 0.9f, 0.5f, 1e-6f, 0.999f};
      const int top_ks[] = {0, 1, 5, 40, vocab};
      const float min_ps[] = {0.0f, 0.05f, 0.3f};
      SampleRow row = Row(trial % 7 == 0 ? 0.0f : 0.3f + float(trial % 5) * 0.3f, top_ks[trial % 5],
                          top_ps[(trial / 5) % 5], min_ps[(trial / 25) % 3]);
      const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
      SCOPED_TRACE(fmt::format("vocab {} trial {} T {} top_k {} top_p {} min_p {} u {}", vocab, trial,
                               row.temperature, row.top_k, row.top_p, row.min_p, u));
      ASSERT_EQ(ChooseToken(x, row, u), ChooseTokenBySortingAll(x, row, u));
      ++cases;
    }
  }
  EXPECT_GT(cases, 1500);
}

// The host sampler's log-sum-exp (a float polynomial exp, double sums) against double exps, on
// rows of logits of every spread, with masked (-inf) entries, up to a 151,936-id row.
TEST(SampleOp, LogSumExpMatchesDoubleExps) {
  std::mt19937 rng(5);
  for (int vocab : {1, 3, 17, 1000, 151936}) {
    for (float spread : {0.1f, 3.0f, 30.0f}) {
      std::normal_distribution<float> normal(0.0f, spread);
      std::vector<float> x(static_cast<size_t>(vocab), 0.0f);
      for (float& v : x) v = normal(rng) + 5.0f;
      if (vocab > 3)
        for (size_t i = 0; i < x.size(); i += 3) x[i] = -std::numeric_limits<float>::infinity();
      const float mx = *std::max_element(x.begin(), x.end());
      double sum = 0;
      for (float v : x) sum += std::exp(double(v - mx));
      const double exact = double(mx) + std::log(sum);
      EXPECT_NEAR(LogSumExp(x), exact, 2e-6 * std::max(1.0, std::abs(exact))) << vocab << " " << spread;
    }
  }
  const std::vector<float> masked(5, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(LogSumExp(masked), -std::numeric_limits<float>::infinity());
}

TEST(SampleOp, BadParamsThrow) {
  Tensor logits(DType::kF32, {2, 10}), rows(DType::kI32, {2, kSampleRowWords}),
      tok(DType::kI32, {2}), counts(DType::kI32, {1, 10});
  FillNormal(logits);
  SampleRow row = Row(1.0f, 0, 1.0f, 0.0f);
  for (int r = 0; r < 2; ++r) std::memcpy(rows.data<int32_t>() + r * kSampleRowWords, &row, sizeof row);
  EXPECT_NO_THROW(Sample({.logits = logits.view(), .rows = rows.view(), .tokens = tok.view()}));
  Tensor bad_tok(DType::kI32, {3});
  EXPECT_THROW(Sample({.logits = logits.view(), .rows = rows.view(), .tokens = bad_tok.view()}), Error);
  row.top_p = 0.0f;
  std::memcpy(rows.data<int32_t>(), &row, sizeof row);
  EXPECT_THROW(Sample({.logits = logits.view(), .rows = rows.view(), .tokens = tok.view()}), Error);
  row = Row(1.0f, 0, 1.0f, 0.0f);
  row.counts_row = 1;  // counts has one row
  std::memcpy(rows.data<int32_t>(), &row, sizeof row);
  EXPECT_THROW(Sample({.logits = logits.view(), .rows = rows.view(), .token_counts = counts.view(),
                       .tokens = tok.view()}),
               Error);
}

}  // namespace
}  // namespace pg::ops::testing
