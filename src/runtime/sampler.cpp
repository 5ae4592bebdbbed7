#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/status.h"

namespace pg::runtime {

SamplerState::SamplerState(const SamplingParams& params, std::span<const int32_t> prompt,
                           uint64_t fallback_seed)
    : params_(params), rng_(params.seed.value_or(fallback_seed)) {
  if (params_.repetition_penalty != 1.0f)
    for (int32_t t : prompt) seen_[t] = true;
}

void SamplerState::Accept(int32_t token) {
  ++generated_[token];
  if (params_.repetition_penalty != 1.0f) seen_[token] = true;
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

int32_t Argmax(std::span<const float> x) {
  return int32_t(std::max_element(x.begin(), x.end()) - x.begin());
}

}  // namespace

SampledToken Sample(std::span<float> logits, SamplerState& st) {
  const SamplingParams& p = st.params();
  const int32_t vocab = int32_t(logits.size());
  PG_CHECK(vocab > 0);
  SampledToken result;
  std::vector<float> lp;
  if (p.top_logprobs >= 0) LogSoftmax(logits, lp);

  // Penalties.
  if (p.repetition_penalty != 1.0f)
    for (const auto& [tok, _] : st.seen())
      if (tok >= 0 && tok < vocab) {
        float& l = logits[size_t(tok)];
        l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
      }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f)
    for (const auto& [tok, count] : st.generated_counts())
      if (tok >= 0 && tok < vocab)
        logits[size_t(tok)] -= p.presence_penalty + p.frequency_penalty * float(count);

  if (p.greedy()) {
    result.token = Argmax(logits);
  } else {
    // Candidates sorted by logit, truncated by top-k; then softmax at temperature.
    std::vector<int32_t> idx(static_cast<size_t>(vocab));
    std::iota(idx.begin(), idx.end(), 0);
    auto by_logit = [&](int32_t a, int32_t b) {
      return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
    };
    size_t k = p.top_k > 0 ? std::min<size_t>(size_t(p.top_k), idx.size()) : idx.size();
    if (k < idx.size() || p.top_p < 1.0f || p.min_p > 0.0f) {
      if (k < idx.size()) {
        std::partial_sort(idx.begin(), idx.begin() + std::ptrdiff_t(k), idx.end(), by_logit);
        idx.resize(k);
      } else {
        std::sort(idx.begin(), idx.end(), by_logit);
      }
    }
    const float inv_t = 1.0f / p.temperature;
    float mx = -std::numeric_limits<float>::infinity();
    for (int32_t i : idx) mx = std::max(mx, logits[size_t(i)]);
    std::vector<double> prob(idx.size());
    double sum = 0;
    for (size_t i = 0; i < idx.size(); ++i) {
      prob[i] = std::exp(double((logits[size_t(idx[i])] - mx) * inv_t));
      sum += prob[i];
    }
    for (auto& v : prob) v /= sum;
    size_t keep = idx.size();
    if (p.top_p < 1.0f) {  // smallest prefix (sorted) whose mass reaches top_p; at least one
      double cum = 0;
      for (size_t i = 0; i < idx.size(); ++i) {
        cum += prob[i];
        if (cum >= double(p.top_p)) { keep = i + 1; break; }
      }
    }
    if (p.min_p > 0.0f) {  // drop tokens below min_p * p(top token)
      double floor = double(p.min_p) * prob[0];
      size_t i = 1;
      while (i < keep && prob[i] >= floor) ++i;
      keep = i;
    }
    double mass = 0;
    for (size_t i = 0; i < keep; ++i) mass += prob[i];
    std::uniform_real_distribution<double> u(0.0, mass);
    double r = u(st.rng());
    size_t chosen = keep - 1;
    for (size_t i = 0; i < keep; ++i) {
      r -= prob[i];
      if (r < 0) { chosen = i; break; }
    }
    result.token = idx[chosen];
  }

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
