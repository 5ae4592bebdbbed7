// The oracle of ops::ChooseToken (tests/ops/sample_test.cpp) and its peer in bench_choose_token.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "kernels/ops_sample.h"

namespace pg::ops {

// sample_math.h's algorithm transcribed plainly, as ChooseToken was before session 47: no
// truncation draws over every token; truncation sorts the top k by (logit desc, index asc)
// (k = the vocabulary without top_k) and sums the kept set in sorted order. The one change:
// masked (-inf) tokens are left out of k, as ChooseToken leaves them out.
inline int32_t ChooseTokenBySortingAll(std::span<const float> x, const SampleRow& row, double u) {
  const int32_t vocab = int32_t(x.size());
  if (IsGreedy(row)) return int32_t(std::max_element(x.begin(), x.end()) - x.begin());
  const float mx = *std::max_element(x.begin(), x.end());
  auto weight = [&](int32_t i) { return std::exp(double((x[size_t(i)] - mx) * (1.0f / row.temperature))); };
  if (!((row.top_k > 0 && row.top_k < vocab) || row.top_p < 1.0f || row.min_p > 0.0f)) {
    double mass = 0;
    for (int32_t i = 0; i < vocab; ++i) mass += weight(i);
    double r = u * mass;
    for (int32_t i = 0; i < vocab; ++i)
      if ((r -= weight(i)) < 0) return i;
    return vocab - 1;
  }
  std::vector<int32_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  size_t k = row.top_k > 0 ? std::min<size_t>(size_t(row.top_k), x.size()) : x.size();
  std::partial_sort(idx.begin(), idx.begin() + std::ptrdiff_t(k), idx.end(), [&](int32_t a, int32_t b) {
    return x[size_t(a)] > x[size_t(b)] || (x[size_t(a)] == x[size_t(b)] && a < b);
  });
  while (k > 1 && std::isinf(x[size_t(idx[k - 1])])) --k;  // masked tokens: weight 0
  idx.resize(k);
  std::vector<double> prob(k);
  double sum = 0;
  for (size_t i = 0; i < k; ++i) sum += (prob[i] = weight(idx[i]));
  for (double& p : prob) p /= sum;
  size_t keep = k;
  if (row.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < k; ++i)
      if ((cum += prob[i]) >= double(row.top_p)) {
        keep = i + 1;
        break;
      }
  }
  if (row.min_p > 0.0f) {
    size_t i = 1;
    while (i < keep && prob[i] >= double(row.min_p) * prob[0]) ++i;
    keep = i;
  }
  std::vector<std::pair<int32_t, double>> kept;
  for (size_t i = 0; i < keep; ++i) kept.emplace_back(idx[i], prob[i]);
  std::sort(kept.begin(), kept.end());
  double mass = 0;
  for (const auto& [i, p] : kept) mass += p;
  double r = u * mass;
  for (const auto& [i, p] : kept)
    if ((r -= p) < 0) return i;
  return vocab > 0 ? kept.back().first : 0;
}

}  // namespace pg::ops
