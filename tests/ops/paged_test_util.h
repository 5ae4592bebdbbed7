// Paged-cache helpers of the attention harness cases (decode_attention_test.cpp,
// fused_attention_test.cpp, rowwise_test.cpp, mla_ops_test.cpp): a batch on shuffled pages, fp8 quantisation of a cache, per-head
// norm weights and an element-wise closeness check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "op_test_util.h"

namespace pg::ops::testing {

// A batch of sequences (q_len, kv_len) on a shuffled page pool holding `spare_pages` pages
// that no sequence owns (a kernel must leave them untouched).
struct PagedBatch {
  std::vector<int32_t> q_start, q_len, kv_len, page_start, page_table;
  int tokens = 0;
  int64_t num_pages = 0;
  AttentionBatch batch;
  PagedBatch(const std::vector<std::pair<int, int>>& seqs, int page_size, int spare_pages = 2) {
    int pages = 0;
    for (auto [ql, kl] : seqs) {
      q_start.push_back(tokens), q_len.push_back(ql), kv_len.push_back(kl);
      page_start.push_back(pages);
      tokens += ql;
      pages += (kl + page_size - 1) / page_size;
    }
    num_pages = pages + spare_pages;
    std::vector<int32_t> perm(static_cast<size_t>(num_pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), Rng());
    page_table.assign(perm.begin(), perm.begin() + pages);
    batch = {int(seqs.size()), page_size, q_start, q_len, kv_len, page_start, page_table};
  }
};

// f32 -> e4m3 bytes of value / scale.
inline void Quantize(const Tensor& f32, const Tensor& f8, float scale) {
  for (int64_t i = 0; i < f32.numel(); ++i)
    f8.data<uint8_t>()[i] = F32ToF8E4M3(f32.data<float>()[i] / scale);
}

// Per-head RMSNorm weights around 1 (so a missing or swapped weight shows).
inline Tensor NormWeight(int head_dim) {
  Tensor w(DType::kF32, {head_dim});
  FillUniform(w, 0.5f, 1.5f);
  RoundToBf16(w);
  return w;
}

// Element-wise: |got - ref| <= rel * |ref| + abs for every element (caches: most slots are
// unwritten zeros, so a tolerance relative to rms(ref) would be meaningless).
inline void ExpectNearEach(const std::vector<float>& ref, const std::vector<float>& got,
                           double rel, double abs, const std::string& what) {
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < ref.size(); ++i)
    if (!(std::fabs(double(got[i]) - ref[i]) <= rel * std::fabs(double(ref[i])) + abs))
      if (bad++ == 0) first = int64_t(i);
  EXPECT_EQ(bad, 0) << what << ": first at " << first << " ref " << (first >= 0 ? ref[size_t(first)] : 0)
                    << " got " << (first >= 0 ? got[size_t(first)] : 0);
}

}  // namespace pg::ops::testing
