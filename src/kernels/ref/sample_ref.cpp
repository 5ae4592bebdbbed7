// ops::Sample: validation, the CPU code of the sampling algorithm (ChooseToken, shared with
// the host sampler), the reference kernel and its registration.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/kernel_util.h"
#include "kernels/ops_sample.h"
#include "kernels/registry.h"
#include "kernels/validate.h"

namespace pg::ops {

// Costs (the host sampler runs this for every CPU-engine token and for the GPU's host rows): one
// max pass, one exp per finite token; with truncation a heap of a small top_k, or a histogram of
// the weights' exponents that bounds the prefix top_p / min_p can keep, and a sort of that
// prefix only (all of the vocabulary only where rounding leaves the bound undecided). Tokens at
// -inf (masked) have weight 0 and are left out of the truncated path's candidates. The kept
// set's sums run in candidate order (sample_math.h allows any order).
// GCC keeps FP compares and selects in loops scalar under its default -ftrapping-math; these
// loops raise no FP exception anyone reads (clang's default is the same).
#if defined(__GNUC__) && !defined(__clang__)
#define PG_VECTOR_FP __attribute__((optimize("no-trapping-math")))
#else
#define PG_VECTOR_FP
#endif

PG_VECTOR_FP float MaxOf(std::span<const float> x) {
  constexpr size_t kLanes = 16;  // independent lanes: the compiler vectorizes them
  const float* p = x.data();
  const size_t n = x.size();
  float lane[kLanes];
  for (float& l : lane) l = p[0];
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) lane[j] = p[i + j] > lane[j] ? p[i + j] : lane[j];
  float m = lane[0];
  for (float l : lane) m = l > m ? l : m;
  for (; i < n; ++i) m = p[i] > m ? p[i] : m;
  return m;
}

namespace {

// exp(d) for d <= 0: 2^k exp(r), k = round(d log2 e) by the 1.5 * 2^23 rounding trick, r = d -
// k ln 2 (ln 2 in two parts) in [-ln2/2, ln2/2], exp(r) by its degree-6 Taylor polynomial
// (error < 3e-8 there); below -87 (2^k under FLT_MIN) the term is 0. Branch-free and written
// out without library calls (GCC will not inline those into an optimize-attributed function),
// so the loop over it vectorizes.
PG_VECTOR_FP __attribute__((always_inline)) inline float ExpNonPositive(float d) {
  const float c = d > -87.0f ? d : -87.0f;
  const float t = c * 1.44269504088896341f + 12582912.0f;
  const float k = t - 12582912.0f;
  const int32_t ki = __builtin_bit_cast(int32_t, t) - 0x4B400000;
  const float r = c - k * 0.693145751953125f - k * 1.42860682030941723212e-6f;
  const float p =
      1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
  const float scale = __builtin_bit_cast(float, (ki + 127) << 23);
  return d > -87.0f ? p * scale : 0.0f;
}

}  // namespace

PG_VECTOR_FP float LogSumExp(std::span<const float> x) {
  const float mx = MaxOf(x);
  if (!(mx > -std::numeric_limits<float>::infinity())) return mx;  // all -inf (or NaN)
  // Blocks of 256 terms in 8 float lanes (relative error ~1e-7 a lane sum), the blocks summed in
  // double.
  constexpr size_t kBlock = 256, kLanes = 8;
  const float* p = x.data();
  const size_t n = x.size();
  double sum = 0;
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    float lane[kLanes] = {};
    for (size_t b = i; b < i + kBlock; b += kLanes)
      for (size_t j = 0; j < kLanes; ++j) lane[j] += ExpNonPositive(p[b + j] - mx);
    for (float l : lane) sum += double(l);
  }
  for (; i < n; ++i) sum += double(ExpNonPositive(p[i] - mx));
  return mx + float(std::log(sum));
}

int32_t ChooseToken(std::span<const float> x, const SampleRow& row, double u) {
  const int32_t vocab = int32_t(x.size());
  PG_CHECK(vocab > 0);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const float mx = MaxOf(x);
  if (IsGreedy(row)) {
    for (int32_t i = 0; i < vocab; ++i)
      if (x[size_t(i)] == mx) return i;
    return 0;  // NaN maximum: as max_element, the first token
  }
  const float inv_t = 1.0f / row.temperature;
  auto weight = [&](int32_t i) {
    return x[size_t(i)] == kNegInf ? 0.0 : std::exp(double((x[size_t(i)] - mx) * inv_t));
  };
  const bool truncate = (row.top_k > 0 && row.top_k < vocab) || row.top_p < 1.0f || row.min_p > 0.0f;
  thread_local std::vector<double> w;
  w.resize(size_t(vocab));
  if (!truncate) {  // every token, weights e_i, index order
    double mass = 0;
    for (int32_t i = 0; i < vocab; ++i) mass += (w[size_t(i)] = weight(i));
    double r = u * mass;
    for (int32_t i = 0; i < vocab; ++i) {
      r -= w[size_t(i)];
      if (r < 0) return i;
    }
    return vocab - 1;
  }
  // The top-k candidates (finite tokens), by (x descending, index ascending).
  thread_local std::vector<int32_t> cand;
  cand.clear();
  for (int32_t i = 0; i < vocab; ++i)
    if (x[size_t(i)] != kNegInf) cand.push_back(i);
  if (cand.empty()) return vocab - 1;
  auto by_logit = [&](int32_t a, int32_t b) {
    return x[size_t(a)] > x[size_t(b)] || (x[size_t(a)] == x[size_t(b)] && a < b);
  };
  const size_t k = row.top_k > 0 ? std::min<size_t>(size_t(row.top_k), cand.size()) : cand.size();
  bool top_k_sorted = false;  // a small top_k: a partial sort (a heap of k) beats a selection
  if (k < cand.size()) {
    if (k <= 1024) {
      std::partial_sort(cand.begin(), cand.begin() + std::ptrdiff_t(k), cand.end(), by_logit);
      top_k_sorted = true;
    } else {
      std::nth_element(cand.begin(), cand.begin() + std::ptrdiff_t(k), cand.end(), by_logit);
    }
    cand.resize(k);
  }
  double sum = 0;
  for (int32_t i : cand) sum += (w[size_t(i)] = weight(i));
  // Only a prefix of the sorted order can be kept: top_p's (within the tokens of weight >= t for
  // the largest power of two t whose tokens hold top_p of the mass: one pass over a histogram of
  // the weights' binary exponents) and min_p's (weight >= min_p times the top token's, 1). Sort
  // the tokens of weight >= t (t lowered a hair so that boundary rounding stays inside) and
  // decide on them; a decision that would need a token beyond them sorts all.
  double t = 0;
  if (row.top_p < 1.0f) {
    constexpr int kBuckets = 1100;  // bucket b: weights in [2^-b, 2^(1-b)); doubles reach 2^-1074
    thread_local std::vector<double> mass_at;
    mass_at.assign(kBuckets, 0.0);
    for (int32_t i : cand) {
      int e = 0;
      std::frexp(w[size_t(i)], &e);
      mass_at[size_t(std::clamp(1 - e, 0, kBuckets - 1))] += w[size_t(i)];
    }
    double cum = 0;
    for (int b = 0; b < kBuckets; ++b) {
      cum += mass_at[size_t(b)];
      if (cum / sum >= double(row.top_p) + 1e-9) {
        t = std::ldexp(1.0, -b);
        break;
      }
    }
  }
  if (row.min_p > 0.0f) t = std::max(t, double(row.min_p));
  t *= 1.0 - 1e-9;
  size_t sorted = k;
  if (!top_k_sorted) {
    const auto tail = std::partition(cand.begin(), cand.end(), [&](int32_t i) { return w[size_t(i)] >= t; });
    sorted = size_t(tail - cand.begin());
    std::sort(cand.begin(), tail, by_logit);
  }
  auto prob = [&](size_t pos) { return w[size_t(cand[pos])] / sum; };
  size_t keep = k;
  if (row.top_p < 1.0f) {  // shortest prefix whose mass reaches top_p (0: not within `sorted`)
    auto top_p_cut = [&] {
      double cum = 0;
      for (size_t i = 0; i < sorted; ++i)
        if ((cum += prob(i)) >= double(row.top_p)) return i + 1;
      return size_t(0);
    };
    keep = top_p_cut();
    if (keep == 0 && sorted < k) {  // rounding left the cut past the bound: sort all
      std::sort(cand.begin(), cand.end(), by_logit);
      sorted = k;
      keep = top_p_cut();
    }
    if (keep == 0) keep = k;
  }
  if (row.min_p > 0.0f) {  // prob >= min_p * prob(top token); the top token always stays
    // Tokens past the sorted ones weigh < t <= min_p * (1 - 1e-9) (the top token weighs 1):
    // all below the floor, so the scan may stop at `sorted`.
    const double floor = double(row.min_p) * prob(0);
    size_t i = 1;
    while (i < keep && i < sorted && prob(i) >= floor) ++i;
    keep = std::min(keep, i);
  }
  // K (the first `keep` in sorted order; all k when nothing cut it) in index order, weights prob_i.
  std::sort(cand.begin(), cand.begin() + std::ptrdiff_t(keep));
  double mass = 0;
  for (size_t i = 0; i < keep; ++i) mass += prob(i);
  double r = u * mass;
  for (size_t i = 0; i < keep; ++i) {
    r -= prob(i);
    if (r < 0) return cand[i];
  }
  return cand[keep - 1];
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
