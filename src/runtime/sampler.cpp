#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"
#include "runtime/grammar.h"
#include "runtime/json_constraint.h"
#include "runtime/json_schema.h"
#include "runtime/regex_constraint.h"

namespace pg::runtime {

SamplerState::SamplerState(const SamplingParams& params, std::span<const int32_t> prompt,
                           uint64_t fallback_seed)
    : params_(params), seed_(params.seed.value_or(fallback_seed)) {
  if (params_.repetition_penalty != 1.0f)
    for (int32_t t : prompt) seen_[t] = true;
  if (params_.token_table)
    constraint_ = params_.grammar ? MakeGrammarConstraint(params_.token_table, params_.grammar)
                  : params_.regex ? MakeRegexConstraint(params_.token_table, params_.regex)
                                  : MakeOutputConstraint(params_.token_table, params_.json_schema);
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

// The n best ids of x by (value desc, id asc), best first: one pass keeping a sorted list of
// n (most ids are rejected by one compare with its last).
std::vector<int32_t> TopIds(std::span<const float> x, size_t n) {
  std::vector<int32_t> best;
  n = std::min(n, x.size());
  if (n == 0) return best;
  best.reserve(n + 1);
  auto better = [&](int32_t a, int32_t b) {
    return x[size_t(a)] > x[size_t(b)] || (x[size_t(a)] == x[size_t(b)] && a < b);
  };
  for (int32_t i = 0; i < int32_t(x.size()); ++i) {
    if (best.size() == n && !better(i, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), i, better), i);
    if (best.size() > n) best.pop_back();
  }
  return best;
}

}  // namespace

SampledToken Sample(std::span<float> logits, SamplerState& st) {
  const SamplingParams& p = st.params();
  const int32_t vocab = int32_t(logits.size());
  PG_CHECK(vocab > 0);
  SampledToken result;
  // Logprobs are of the raw logits: their log-sum-exp and, for alternatives, their top ids
  // (the order of the raw logits is the order of the logprobs), taken before anything edits them.
  float lse = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
  if (p.top_logprobs >= 0) {
    lse = ops::LogSumExp(logits);
    for (int32_t id : TopIds(logits, size_t(std::max(p.top_logprobs, 0))))
      top.emplace_back(id, logits[size_t(id)] - lse);
  }
  // The chosen token's raw logit: a copy of the row only where something below edits it.
  const bool edits = !p.logit_bias.empty() || st.constraint() != nullptr || p.has_penalties();
  std::vector<float> raw;
  if (p.top_logprobs >= 0 && edits) raw.assign(logits.begin(), logits.end());
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
    result.logprob = (raw.empty() ? logits[size_t(result.token)] : raw[size_t(result.token)]) - lse;
    result.top = std::move(top);
  }
  st.Accept(result.token);
  return result;
}

int SampleSpeculative(std::span<float> rows, int vocab, std::span<const int32_t> drafts,
                      SamplerState& state, std::vector<SampledToken>* out) {
  PG_CHECK(rows.size() == (drafts.size() + 1) * size_t(vocab), "{} logits for {} drafts",
           rows.size(), drafts.size());
  for (size_t i = 0;; ++i) {
    out->push_back(Sample(rows.subspan(i * size_t(vocab), size_t(vocab)), state));
    if (i == drafts.size() || out->back().token != drafts[i]) return int(i + 1);
  }
}

}  // namespace pg::runtime
