// Paged attention on prefill-shaped batches (the tensor-core prefill kernel's cases on CUDA:
// attention/prefill_attention.h takes every sequence with q_len >= 2 at head_dim 64/128),
// every backend against ref: q_len 1..200 beside decode rows, cached prefixes that end
// mid-page (page sizes 16 and 7), GQA groups 1, 4 and 8, several sequences of different
// lengths in one batch, sliding window and softcap, and (device backends) a long cached
// prefix with few new tokens, where the prefill kernel splits the key range (split-K).
// Each case runs with f32 caches and with fp8 e4m3 caches (ref reads fp8 too).
// Outputs start as NaN, so a row a kernel forgets to write fails the finite check.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <numeric>

#include "op_test_util.h"

namespace pg::ops::testing {
namespace {

constexpr Tolerance kAttention{1e-4, 1e-9};  // f32 CPU backends (as attention_test.cpp)

struct PrefillCase {
  int heads, kv_heads, head_dim, page_size;
  std::vector<std::pair<int, int>> seqs;  // (q_len, kv_len)
  int window = 0;
  float softcap = 0;
  bool device_only = false;  // large: run only when a device backend can take it
  std::string Name() const {
    std::string s;
    for (auto [q, k] : seqs) s += fmt::format("({},{})", q, k);
    return fmt::format("{}:{} d={} page={} seqs={} window={} softcap={}", heads, kv_heads,
                       head_dim, page_size, s, window, softcap);
  }
};

std::vector<PrefillCase> Cases() {
  // Decode rows, short and long prefill chunks, prefixes not a multiple of the page, q_len 2.
  const std::vector<std::pair<int, int>> mixed = {
      {1, 300}, {200, 200}, {37, 102}, {2, 130}, {113, 613}, {1, 1}, {64, 64}, {65, 70}};
  return {
      {16, 4, 128, 16, mixed},                          // group 4 (Llama-3: 32:8)
      {8, 8, 128, 7, {{129, 129}, {1, 50}, {3, 9}}},    // group 1, page 7
      {16, 2, 64, 16, mixed},                           // group 8, d 64
      {12, 3, 64, 7, {{150, 477}, {17, 17}}},           // group 4, d 64, page 7
      {16, 4, 128, 16, {{90, 400}, {1, 33}, {45, 45}}, 100},        // sliding window
      {16, 4, 128, 16, {{77, 300}, {2, 2}}, 0, 30.0f},              // softcap
      {8, 2, 80, 16, {{40, 90}, {1, 20}}},              // d 80: the decode kernel's fallback
      {8, 2, 128, 16, {{130, 180}, {1, 40}, {150, 150}}},  // >= 512 packed rows: 128-row tiles
      // Long cached prefixes, few new tokens: split-K (and its combine) engages.
      {8, 2, 128, 16, {{64, 2500}, {1, 2000}, {7, 1500}}, 0, 0.0f, true},
      {8, 2, 128, 16, {{100, 2100}}, 0, 0.0f, true},
  };
}

TEST(PrefillAttention, EveryBackendMatchesReference) {
  PG_SEED_TRACE();
  Coverage cov;
  bool any_device = false;
  for (const auto* k : Backends<AttentionParams>()) any_device |= OnDevice(*k);
  for (const PrefillCase& c : Cases()) {
    if (c.device_only && !any_device) continue;
    SCOPED_TRACE(c.Name());
    std::vector<int32_t> q_start, q_len, kv_len, page_start, page_table;
    int32_t q = 0, pages = 0;
    for (auto [ql, kl] : c.seqs) {
      q_start.push_back(q), q_len.push_back(ql), kv_len.push_back(kl), page_start.push_back(pages);
      q += ql;
      pages += (kl + c.page_size - 1) / c.page_size;
    }
    const int64_t num_pages = pages + 3;
    std::vector<int32_t> perm(static_cast<size_t>(num_pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), Rng());
    page_table.assign(perm.begin(), perm.begin() + pages);
    AttentionBatch batch{int(c.seqs.size()), c.page_size, q_start, q_len, kv_len, page_start, page_table};

    Tensor qt(DType::kF32, {q, c.heads, c.head_dim});
    Tensor kc(DType::kF32, {num_pages, c.page_size, c.kv_heads, c.head_dim});
    Tensor vc(DType::kF32, {num_pages, c.page_size, c.kv_heads, c.head_dim});
    FillNormal(qt);
    FillNormal(kc, 0.0f, 0.5f);
    FillNormal(vc, 0.0f, 2.0f);
    for (const Tensor* t : {&qt, &kc, &vc}) RoundToBf16(*t);
    // The same values as fp8 e4m3 caches holding value / scale (ops.h KvCacheView).
    const float k_scale = 0.5f / 64, v_scale = 2.0f / 64;
    Tensor kc8(DType::kF8E4M3, {num_pages, c.page_size, c.kv_heads, c.head_dim});
    Tensor vc8(DType::kF8E4M3, {num_pages, c.page_size, c.kv_heads, c.head_dim});
    for (int64_t i = 0; i < kc.numel(); ++i) {
      kc8.data<uint8_t>()[i] = F32ToF8E4M3(kc.data<float>()[i] / k_scale);
      vc8.data<uint8_t>()[i] = F32ToF8E4M3(vc.data<float>()[i] / v_scale);
    }
    for (const bool fp8 : {false, true}) {
    if (fp8 && !any_device) continue;  // only device backends read fp8 caches
    SCOPED_TRACE(fp8 ? "fp8 e4m3 cache" : "f32 cache");
    Tensor ref_out(DType::kF32, {q, c.heads, c.head_dim});
    const KvCacheView cache = fp8 ? KvCacheView{kc8.view(), vc8.view(), k_scale, v_scale}
                                  : KvCacheView{kc.view(), vc.view()};
    AttentionParams p{qt.view(), ref_out.view(), cache, &batch, 0.0f, c.window, c.softcap};
    RunWith(RefImpl<AttentionParams>(), p);
    for (const auto* k : Backends<AttentionParams>()) {
      if (c.device_only && !OnDevice(*k)) continue;
      Tensor out(DType::kF32, {q, c.heads, c.head_dim});
      std::fill(out.data<float>(), out.data<float>() + out.numel(),
                std::numeric_limits<float>::quiet_NaN());
      p.out = out.view();
      if (!RunBackend(*k, p)) continue;
      cov.Ran(k->backend);
      ExpectClose(ref_out.data<float>(), out.data<float>(), out.numel(),
                  OnDevice(*k) ? kBf16Attention : kAttention, k->backend);
    }
    }
  }
  cov.Check<AttentionParams>();
}

}  // namespace
}  // namespace pg::ops::testing
