// ops::Sample: validation, the CPU code of the sampling algorithm (ChooseToken, shared with
// the host sampler), the reference kernel and its registration.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/kernel_util.h"
#include "kernels/ops_sample.h"
#include "kernels/registry.h"
#include "kernels/validate.h"

namespace pg::ops {

int32_t ChooseToken(std::span<const float> x, const SampleRow& row, double u) {
  const int32_t vocab = int32_t(x.size());
  PG_CHECK(vocab > 0);
  if (IsGreedy(row)) return int32_t(std::max_element(x.begin(), x.end()) - x.begin());
  const size_t k = row.top_k > 0 ? std::min<size_t>(size_t(row.top_k), x.size()) : x.size();
  const bool truncate = k < x.size() || row.top_p < 1.0f || row.min_p > 0.0f;
  const float mx = *std::max_element(x.begin(), x.end());
  const float inv_t = 1.0f / row.temperature;
  auto weight = [&](int32_t i) { return std::exp(double((x[size_t(i)] - mx) * inv_t)); };
  if (!truncate) {  // every token, weights e_i, index order
    double mass = 0;
    for (int32_t i = 0; i < vocab; ++i) mass += weight(i);
    double r = u * mass;
    for (int32_t i = 0; i < vocab; ++i) {
      r -= weight(i);
      if (r < 0) return i;
    }
    return vocab - 1;
  }
  // Sorted by (x descending, index ascending), truncated to the top k.
  std::vector<int32_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) {
    return x[size_t(a)] > x[size_t(b)] || (x[size_t(a)] == x[size_t(b)] && a < b);
  };
  std::partial_sort(idx.begin(), idx.begin() + std::ptrdiff_t(k), idx.end(), by_logit);
  idx.resize(k);
  std::vector<double> prob(k);
  double sum = 0;
  for (size_t i = 0; i < k; ++i) sum += (prob[i] = weight(idx[i]));
  for (double& p : prob) p /= sum;
  size_t keep = k;
  if (row.top_p < 1.0f) {  // shortest prefix whose mass reaches top_p
    double cum = 0;
    for (size_t i = 0; i < k; ++i) {
      cum += prob[i];
      if (cum >= double(row.top_p)) {
        keep = i + 1;
        break;
      }
    }
  }
  if (row.min_p > 0.0f) {  // prob >= min_p * prob(top token); the top token always stays
    const double floor = double(row.min_p) * prob[0];
    size_t i = 1;
    while (i < keep && prob[i] >= floor) ++i;
    keep = i;
  }
  // K in index order, weights prob_i.
  std::vector<std::pair<int32_t, double>> kept(keep);
  for (size_t i = 0; i < keep; ++i) kept[i] = {idx[i], prob[i]};
  std::sort(kept.begin(), kept.end());
  double mass = 0;
  for (const auto& [i, p] : kept) mass += p;
  double r = u * mass;
  for (const auto& [i, p] : kept) {
    r -= p;
    if (r < 0) return i;
  }
  return kept.back().first;
}

namespace {

void RefSample(const SampleParams& p) {
  const int64_t n = p.logits.dim(0), vocab = p.logits.dim(1);
  const SampleRow* rows = RowsOf(p.rows);
  std::vector<float> x(static_cast<size_t>(vocab));
  for (int64_t r = 0; r < n; ++r) {
    const SampleRow& row = rows[r];
    const float* raw = detail::RowF32(p.logits, r);
    int32_t* counts = row.counts_row >= 0 && p.token_counts.data
                          ? p.token_counts.as<int32_t>() + row.counts_row * vocab
                          : nullptr;
    for (int64_t i = 0; i < vocab; ++i)
      x[size_t(i)] = counts ? PenalizeLogit(raw[i], CountGenerated(counts[i]),
                                            CountSeen(counts[i]), row)
                            : raw[i];
    const int32_t token = ChooseToken(x, row, SampleUniform(RowSeed(row), row.step));
    p.tokens.as<int32_t>()[r] = token;
    if (p.logprobs.data) {  // log_softmax of the raw logits, as the host sampler
      const float mx = *std::max_element(raw, raw + vocab);
      double sum = 0;
      for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(raw[i] - mx));
      p.logprobs.as<float>()[r] = raw[token] - (mx + float(std::log(sum)));
    }
    if (p.update_counts && counts) counts[token] += kCountGeneratedOne;
  }
}

}  // namespace

void Validate(const SampleParams& p) {
  constexpr std::string_view op = "Sample";
  const TensorView& l = p.logits;
  PG_OP_NEED(l.ndim == 2 && l.data && l.strides[1] == 1 && l.dim(1) > 0 &&
                 (l.dtype == DType::kF32 || (l.dtype == DType::kBF16 && l.device == Device::kCuda)),
             op, "logits must be [n, vocab > 0] f32 (bf16 on cuda) with packed rows, got {}",
             l.ShapeString());
  const int64_t n = l.dim(0), vocab = l.dim(1);
  PG_OP_NEED(p.rows.ndim == 2 && p.rows.dtype == DType::kI32 && p.rows.is_contiguous() &&
                 p.rows.dim(0) == n && p.rows.dim(1) == kSampleRowWords && (p.rows.data || n == 0),
             op, "rows {} must be [{}, {}] i32", p.rows.ShapeString(), n, kSampleRowWords);
  PG_OP_NEED(p.tokens.ndim == 1 && p.tokens.dtype == DType::kI32 && p.tokens.dim(0) == n &&
                 p.tokens.is_contiguous() && (p.tokens.data || n == 0),
             op, "tokens {} must be [{}] i32", p.tokens.ShapeString(), n);
  if (p.logprobs.data)
    PG_OP_NEED(p.logprobs.ndim == 1 && p.logprobs.dtype == DType::kF32 && p.logprobs.dim(0) == n &&
                   p.logprobs.is_contiguous(),
               op, "logprobs {} must be [{}] f32", p.logprobs.ShapeString(), n);
  if (p.token_counts.data)
    PG_OP_NEED(p.token_counts.ndim == 2 && p.token_counts.dtype == DType::kI32 &&
                   p.token_counts.dim(1) == vocab && p.token_counts.is_contiguous(),
               op, "token_counts {} must be [rows, {}] i32", p.token_counts.ShapeString(), vocab);
  PG_OP_NEED(!p.update_counts || p.token_counts.data, op, "update_counts needs token_counts");
  for (const TensorView* t : {&p.rows, &p.token_counts, &p.tokens, &p.logprobs})
    PG_OP_NEED(!t->data || t->device == l.device, op, "tensors on different devices");
  // Row parameters are checked where they are readable (host rows; device rows were built
  // on the host by the runtime from validated SamplingParams).
  if (p.rows.device == Device::kCpu)
    for (int64_t r = 0; r < n; ++r) {
      const SampleRow& s = RowsOf(p.rows)[r];
      PG_OP_NEED(s.top_p > 0.0f && s.top_p <= 1.0f && s.min_p >= 0.0f && s.min_p <= 1.0f &&
                     s.repetition_penalty > 0.0f,
                 op, "row {}: top_p {} must be in (0, 1], min_p {} in [0, 1], repetition_penalty "
                 "{} > 0", r, s.top_p, s.min_p, s.repetition_penalty);
      PG_OP_NEED(s.counts_row < 0 || (p.token_counts.data && s.counts_row < p.token_counts.dim(0)),
                 op, "row {}: counts_row {} outside token_counts {}", r, s.counts_row,
                 p.token_counts.ShapeString());
    }
}

Device DeviceOf(const SampleParams& p) { return p.logits.device; }
std::string_view OpName(const SampleParams&) { return "Sample"; }

void RegisterSampleKernels(Registry& r) {
  r.Register(KernelImpl<SampleParams>{"ref", Device::kCpu, kPriorityRef, {}, &RefSample});
}

void Sample(const SampleParams& p) { Registry::Global().Run(p); }

}  // namespace pg::ops
