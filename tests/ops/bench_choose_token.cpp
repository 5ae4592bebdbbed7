// ChooseToken (ref/sample_ref.cpp, run by the host sampler for every CPU-engine token) against
// the algorithm as it was before session 47 (sample_oracle.h: truncation sorts the whole top k,
// the vocabulary without top_k), side by side on the same rows: logits ~ N(0, 3) (a spread like a model's),
// 49,152 and 151,936 ids. Prints µs a call and how many of 20 draws agree; asserts nothing.
//   build/cpu/tests/ops/bench_choose_token
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "sample_oracle.h"

int main() {
  using namespace pg::ops;
  for (size_t n : {size_t(49152), size_t(151936)}) {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> x(n);
    for (float& v : x) v = normal(rng);
    struct Setting {
      const char* name;
      float t, top_p, min_p;
      int top_k;
    };
    const Setting settings[] = {{"greedy", 0, 1, 0, 0},
                                {"T=0.8", 0.8f, 1, 0, 0},
                                {"T=0.7 top_p=0.9", 0.7f, 0.9f, 0, 0},
                                {"T=1 top_p=0.95", 1.0f, 0.95f, 0, 0},
                                {"T=0.6 top_k=50 min_p=0.05", 0.6f, 1, 0.05f, 50}};
    for (const Setting& st : settings) {
      SampleRow r;
      r.temperature = st.t, r.top_p = st.top_p, r.min_p = st.min_p, r.top_k = st.top_k;
      constexpr int kDraws = 20;
      double us[2];
      long sink = 0;
      for (int which = 0; which < 2; ++which) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < kDraws; ++i) {
          const double u = (i + 0.5) / kDraws;
          sink += which == 0 ? ChooseTokenBySortingAll(x, r, u) : ChooseToken(x, r, u);
        }
        us[which] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / kDraws;
      }
      int agree = 0;
      for (int i = 0; i < kDraws; ++i)
        agree += ChooseToken(x, r, (i + 0.5) / kDraws) == ChooseTokenBySortingAll(x, r, (i + 0.5) / kDraws);
      std::printf("%6zu ids  %-27s before %8.1f us   ChooseToken %7.1f us   %5.1fx   same token %d/%d (%ld)\n", n,
                  st.name, us[0], us[1], us[0] / us[1], agree, kDraws, sink % 2);
    }
    // The host sampler's logprobs: log-sum-exp by double exps (before) and by LogSumExp.
    double us[2], v[2];
    for (int which = 0; which < 2; ++which) {
      constexpr int kIters = 20;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kIters; ++i) {
        if (which == 0) {
          const float mx = *std::max_element(x.begin(), x.end());
          double sum = 0;
          for (float e : x) sum += std::exp(double(e - mx));
          v[0] = double(mx) + std::log(sum);
        } else {
          v[1] = LogSumExp(x);
        }
      }
      us[which] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / kIters;
    }
    std::printf("%6zu ids  %-27s before %8.1f us   LogSumExp   %7.1f us   %5.1fx   |difference| %.2e\n", n,
                "log-sum-exp (logprobs)", us[0], us[1], us[0] / us[1], std::abs(v[0] - v[1]));
  }
  return 0;
}
