#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/status.h"
#include "runtime/json_constraint.h"
#include "runtime/json_schema.h"

namespace pg::runtime {

SamplerState::SamplerState(const SamplingParams& params, std::span<const int32_t> prompt,
                           uint64_t fallback_seed)
    : params_(params), seed_(params.seed.value_or(fallback_seed)) {
  if (params_.repetition_penalty != 1.0f)
    for (int32_t t : prompt) seen_[t] = true;
  if (params_.token_table) constraint_ = MakeOutputConstraint(params_.token_table, params_.json_schema);
}

void SamplerState::Accept(int32_t token) {
  ++step_;
  ++generated_[token];
  if (params_.repetition_penalty != 1.0f) seen_[token] = true;
  if (constraint_) constraint_->Accept(token);
}

ops::SampleRow SamplerState::Row() const {
  ops::SampleRow r;
  r.temperature = params_.temperature;
  r.top_k = params_.top_k;
  r.top_p = params_.top_p;
  r.min_p = params_.min_p;
  r.repetition_penalty = params_.repetition_penalty;
  r.presence_penalty = params_.presence_penalty;
  r.frequency_penalty = params_.frequency_penalty;
  r.seed_lo = uint32_t(seed_);
  r.seed_hi = uint32_t(seed_ >> 32);
  r.step = step_;
  return r;
}

namespace {

// log_softmax of the raw logits, for logprobs.
void LogSoftmax(std::span<const float> x, std::vector<float>& out) {
  float mx = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (float v : x) sum += std::exp(double(v - mx));
  float lse = mx + float(std::log(sum));
  out.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] - lse;
}

}  // namespace

SampledToken Sample(std::span<float> logits, SamplerState& st) {
  const SamplingParams& p = st.params();
  const int32_t vocab = int32_t(logits.size());
  PG_CHECK(vocab > 0);
  SampledToken result;
  std::vector<float> lp;
  if (p.top_logprobs >= 0) LogSoftmax(logits, lp);
  for (const auto& [tok, bias] : p.logit_bias)
    if (tok >= 0 && tok < vocab) logits[size_t(tok)] += bias;
  if (const OutputConstraint* c = st.constraint()) c->Mask(logits);

  // Penalties (sample_math.h's formula, once per token generated or seen), then the shared
  // choice.
  const ops::SampleRow row = st.Row();
  for (const auto& [tok, count] : st.generated_counts())
    if (tok >= 0 && tok < vocab)
      logits[size_t(tok)] = ops::PenalizeLogit(logits[size_t(tok)], count, true, row);
  for (const auto& [tok, _] : st.seen())
    if (tok >= 0 && tok < vocab && !st.generated_counts().count(tok))
      logits[size_t(tok)] = ops::PenalizeLogit(logits[size_t(tok)], 0, true, row);
  result.token = ops::ChooseToken(logits, row, ops::SampleUniform(st.seed(), st.step()));

  if (p.top_logprobs >= 0) {
    result.logprob = lp[size_t(result.token)];
    if (p.top_logprobs > 0) {
      std::vector<int32_t> order(static_cast<size_t>(vocab));
      std::iota(order.begin(), order.end(), 0);
      size_t n = std::min<size_t>(size_t(p.top_logprobs), order.size());
      std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(n), order.end(),
                        [&](int32_t a, int32_t b) { return lp[size_t(a)] > lp[size_t(b)]; });
      for (size_t i = 0; i < n; ++i) result.top.emplace_back(order[i], lp[size_t(order[i])]);
    }
  }
  st.Accept(result.token);
  return result;
}

}  // namespace pg::runtime
