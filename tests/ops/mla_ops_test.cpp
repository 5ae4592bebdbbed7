// MLA ops (ops_moe.h) in the op harness, DeepSeek latent shape (kv_lora_rank 512, rope 64):
//  * ref: an fp8 e4m3 latent cache stores round_fp8(latent / scale) and attention over it
//    equals attention over an f32 cache holding the dequantized values;
//  * every backend (CUDA: absorbed decode kernel + split-K combine, expanded prefill kernel,
//    cache write) against ref, bf16 and fp8 caches, on mixed batches: decode rows, several
//    query positions per sequence (speculative verification), prefills with and without a
//    cached prefix, odd page sizes, shuffled pages, contexts long enough for split-K.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/quant.h"
#include "kernels/ops_moe.h"
#include "op_test_util.h"

namespace pg::ops::testing {

#if defined(PEREGRINE_HAVE_CUDA)
// Latent caches: f32 on the host -> bf16 on the device (an activation); fp8 -> the same bytes.
inline KvCacheView MirrorLatent(DeviceMirror& m, const KvCacheView& c, bool copy_back) {
  if (c.k_cache.dtype == DType::kF32)
    return {m.Act(c.k_cache, copy_back), m.Act(c.v_cache, copy_back), c.k_scale, c.v_scale};
  return {m.Raw(c.k_cache), m.Raw(c.v_cache), c.k_scale, c.v_scale};
}
inline MlaAttentionParams Mirror(DeviceMirror& m, const MlaAttentionParams& p) {
  MlaAttentionParams d = p;
  d.q = m.Act(p.q, false);
  d.out = m.Act(p.out, true);
  d.w_kv_b = m.Raw(p.w_kv_b);
  d.cache = MirrorLatent(m, p.cache, false);
  return d;
}
inline MlaCacheWriteParams Mirror(DeviceMirror& m, const MlaCacheWriteParams& p) {
  // fp8 caches are not copied back by the mirror: MlaCacheWriteMatchesRef reads them itself.
  return {m.Act(p.latent, false), MirrorLatent(m, p.cache, true), p.batch};
}
#endif

namespace {

constexpr int kRank = 512, kRope = 64, kLatent = kRank + kRope, kHalf = kLatent / 2;

Tensor F32(std::initializer_list<int64_t> shape, float stddev = 1.0f) {
  Tensor t(DType::kF32, shape);
  FillNormal(t, 0.0f, stddev);
  return t;
}

// bf16 weights (the CUDA backend's weight type; ref dequantizes the same values).
Tensor Bf16Weight(int64_t rows, int64_t cols, float stddev) {
  Tensor f = F32({rows, cols}, stddev);
  Tensor w(DType::kBF16, {rows, cols});
  for (int64_t i = 0; i < f.numel(); ++i) w.data<uint16_t>()[i] = F32ToBf16(f.data<float>()[i]);
  return w;
}

// Sequences (q_len, kv_len) over shuffled pages, plus the "whole history" batch that writes
// every latent row.
struct Batch {
  std::vector<int32_t> q_start, q_len, kv_len, page_start, page_table, fq_start, fq_len;
  AttentionBatch batch, full;
  int64_t num_pages = 0, tokens = 0, history = 0;
  Batch(const std::vector<std::pair<int, int>>& seqs, int page_size) {
    int32_t q = 0, pages = 0, h = 0;
    for (auto [ql, kl] : seqs) {
      q_start.push_back(q), q_len.push_back(ql), kv_len.push_back(kl), page_start.push_back(pages);
      fq_start.push_back(h), fq_len.push_back(kl);
      q += ql, h += kl;
      pages += (kl + page_size - 1) / page_size;
    }
    num_pages = pages + 2;
    std::vector<int32_t> perm(static_cast<size_t>(num_pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), Rng());
    page_table.assign(perm.begin(), perm.begin() + pages);
    tokens = q, history = h;
    batch = {.num_seqs = int(seqs.size()), .page_size = page_size, .q_start = q_start,
             .q_len = q_len, .kv_len = kv_len, .page_start = page_start, .page_table = page_table};
    full = batch;
    full.q_start = fq_start;
    full.q_len = fq_len;
  }
};

// A latent cache of `dtype` (f32 stands for the device's bf16; or fp8 e4m3) with every
// history row written by ref MlaCacheWrite from bf16-representable latents.
struct LatentCache {
  Tensor k, v;
  KvCacheView view;
  LatentCache(const Batch& b, DType dtype, float k_scale, float v_scale, int rank = kRank,
              int rope = kRope)
      : k(dtype, {b.num_pages, b.batch.page_size, 1, MlaCacheHalfDim(rank, rope)}),
        v(dtype, {b.num_pages, b.batch.page_size, 1, MlaCacheHalfDim(rank, rope)}) {
    if (dtype == DType::kF32) {
      FillNormal(k);  // stale slots must not matter
      FillNormal(v);
    } else {
      for (Tensor* t : {&k, &v})
        for (int64_t i = 0; i < t->numel(); ++i)
          t->data<uint8_t>()[i] = F32ToF8E4M3(float(RandInt(-40, 40)) / 8.0f);
    }
    view = {k.view(), v.view(), k_scale, v_scale};
    Tensor latent = F32({b.history, rank + rope});
    RoundToBf16(latent);
    SetMaxKernelPriority(kPriorityRef);
    MlaCacheWrite({.latent = latent.view(), .cache = view, .batch = &b.full});
    SetMaxKernelPriority(std::numeric_limits<int>::max());
  }
};

std::vector<uint8_t> Bytes(const Tensor& t) {
  return std::vector<uint8_t>(t.data<uint8_t>(), t.data<uint8_t>() + t.nbytes());
}

TEST(MlaRef, Fp8CacheStoresRoundedLatentsAndAttendsToTheirValues) {
  PG_SEED_TRACE();
  Batch b({{1, 37}, {3, 20}}, 8);
  const float ks = 0.25f, vs = 0.125f;
  Tensor kc(DType::kF8E4M3, {b.num_pages, 8, 1, kHalf}), vc(DType::kF8E4M3, {b.num_pages, 8, 1, kHalf});
  Tensor latent = F32({b.history, kLatent}, 3.0f);
  latent.data<float>()[5] = 1000.0f;  // saturates: 448 * 0.25 = 112
  KvCacheView fp8{kc.view(), vc.view(), ks, vs};
  MlaCacheWrite({.latent = latent.view(), .cache = fp8, .batch = &b.full});
  // The same values, dequantized, in an f32 cache.
  Tensor kf(DType::kF32, {b.num_pages, 8, 1, kHalf}), vf(DType::kF32, {b.num_pages, 8, 1, kHalf});
  kf.Zero();
  vf.Zero();
  for (int64_t i = 0; i < kc.numel(); ++i) {
    kf.data<float>()[i] = F8E4M3ToF32(kc.data<uint8_t>()[i]) * ks;
    vf.data<float>()[i] = F8E4M3ToF32(vc.data<uint8_t>()[i]) * vs;
  }
  // Row 0 of sequence 0 (position 0) lives in page page_table[0], slot 0.
  const int64_t off = int64_t(b.page_table[0]) * 8 * kHalf;
  EXPECT_EQ(kf.data<float>()[off + 5], 112.0f);
  for (int64_t e = 0; e < kLatent; ++e) {
    const float want = e < kHalf ? F8E4M3ToF32(F32ToF8E4M3(latent.data<float>()[e] / ks)) * ks
                                 : F8E4M3ToF32(F32ToF8E4M3(latent.data<float>()[e] / vs)) * vs;
    const float got = e < kHalf ? kf.data<float>()[off + e] : vf.data<float>()[off + e - kHalf];
    ASSERT_EQ(got, want) << "element " << e;
  }
  const int heads = 2, nope = 16, vd = 8;
  Tensor w = F32({heads * (nope + vd), kRank}, 0.05f), q = F32({b.tokens, heads, nope + kRope});
  for (MlaMode mode : {MlaMode::kAbsorbed, MlaMode::kExpanded}) {
    Tensor o8(DType::kF32, {b.tokens, heads, vd}), of(DType::kF32, {b.tokens, heads, vd});
    MlaAttentionParams p{.q = q.view(), .w_kv_b = w.view(), .out = o8.view(), .cache = fp8,
                         .batch = &b.batch, .kv_lora_rank = kRank, .rope_dim = kRope, .mode = mode};
    MlaAttention(p);
    p.out = of.view();
    p.cache = {kf.view(), vf.view()};
    MlaAttention(p);
    ExpectExact(of.data<float>(), o8.data<float>(), o8.numel(), "fp8 cache vs its values in f32");
  }
}

struct Case {
  int heads, nope, v, page_size;
  std::vector<std::pair<int, int>> seqs;  // (q_len, kv_len)
  bool expanded;                          // also run the expanded mode (ref cost)
  int rank = kRank, rope = kRope;
};

TEST(MlaAttentionOp, BackendsMatchRef) {
  PG_SEED_TRACE();
  const std::vector<Case> cases = {
      {16, 128, 128, 16, {{1, 300}, {4, 77}, {1, 1}, {3, 3}}, true},   // V2-Lite heads, mixed
      {3, 128, 128, 7, {{17, 30}, {1, 64}, {2, 2}}, true},              // odd page, 1 split
      {16, 128, 128, 64, {{1, 5000}, {2, 3000}}, false},                // long: many splits
      {128, 128, 128, 64, {{1, 700}, {4, 90}}, false},                  // V3 heads
      {20, 64, 64, 16, {{70, 100}, {1, 33}}, true},                     // 64/64/64 prefill shape
      {8, 128, 128, 16, {{130, 130}, {65, 200}}, true},                 // prefill > 1 row tile
      // Other latent shapes (the generic kernel): the tiny golden models, and odd sizes.
      {4, 32, 24, 4, {{1, 29}, {5, 5}, {2, 40}}, true, 64, 16},
      {2, 24, 32, 16, {{7, 7}, {1, 30}}, true, 48, 8},
      {3, 10, 12, 5, {{1, 40}, {17, 30}, {1, 1}}, true, 21, 6},
  };
  if (Backends<MlaAttentionParams>().empty()) GTEST_SKIP() << "no MlaAttention backend besides ref";
  Coverage cov;
  for (const Case& c : cases) {
    for (DType dt : {DType::kF32, DType::kF8E4M3}) {
      for (MlaMode mode : {MlaMode::kAbsorbed, MlaMode::kExpanded}) {
        if (mode == MlaMode::kExpanded && !c.expanded) continue;
        const std::string what =
            fmt::format("heads {} nope {} v {} rank {} rope {} page {} cache {} {}", c.heads,
                        c.nope, c.v, c.rank, c.rope, c.page_size, dt == DType::kF32 ? "bf16" : "fp8",
                        mode == MlaMode::kAbsorbed ? "absorbed" : "expanded");
        SCOPED_TRACE(what);
        Batch b(c.seqs, c.page_size);
        LatentCache cache(b, dt, dt == DType::kF32 ? 1.0f : 0.125f,
                          dt == DType::kF32 ? 1.0f : 0.0625f, c.rank, c.rope);
        Tensor w = Bf16Weight(c.heads * (c.nope + c.v), c.rank, 0.05f);
        Tensor q = F32({b.tokens, c.heads, c.nope + c.rope});
        RoundToBf16(q);
        Tensor ref_out(DType::kF32, {b.tokens, c.heads, c.v}), got(DType::kF32, {b.tokens, c.heads, c.v});
        MlaAttentionParams p{.q = q.view(), .w_kv_b = w.view(), .out = ref_out.view(),
                             .cache = cache.view, .batch = &b.batch, .kv_lora_rank = c.rank,
                             .rope_dim = c.rope, .scale = 0.8f / std::sqrt(float(c.nope + c.rope)),
                             .mode = mode};
        RunWith(RefImpl<MlaAttentionParams>(), p);
        for (const auto* k : Backends<MlaAttentionParams>()) {
          got.Zero();
          p.out = got.view();
          if (!RunBackend(*k, p)) continue;
          cov.Ran(k->backend);
          ExpectClose(ref_out.data<float>(), got.data<float>(), got.numel(), kBf16Attention,
                      k->backend + " " + what);
        }
      }
    }
  }
  cov.Check<MlaAttentionParams>();
}

TEST(MlaCacheWriteOp, BackendsMatchRef) {
  PG_SEED_TRACE();
  Coverage cov;
  for (DType dt : {DType::kF32, DType::kF8E4M3}) {
    SCOPED_TRACE(dt == DType::kF32 ? "bf16 cache" : "fp8 cache");
    Batch b({{1, 40}, {5, 9}, {3, 3}}, 6);
    LatentCache want(b, dt, 1.0f, 1.0f);
    if (dt == DType::kF8E4M3) want.view.k_scale = 0.5f, want.view.v_scale = 0.25f;
    Tensor latent = F32({b.tokens, kLatent}, 4.0f);
    RoundToBf16(latent);
    // Write the new tokens again, through ref and each backend, from the same cache contents.
    const std::vector<uint8_t> k0 = Bytes(want.k), v0 = Bytes(want.v);
    MlaCacheWriteParams p{.latent = latent.view(), .cache = want.view, .batch = &b.batch};
    RunWith(RefImpl<MlaCacheWriteParams>(), p);
    for (const auto* k : Backends<MlaCacheWriteParams>()) {
      Tensor gk(want.k.dtype(), {b.num_pages, b.batch.page_size, 1, kHalf}),
          gv(want.v.dtype(), {b.num_pages, b.batch.page_size, 1, kHalf});
      std::memcpy(gk.data<uint8_t>(), k0.data(), k0.size());
      std::memcpy(gv.data<uint8_t>(), v0.data(), v0.size());
      MlaCacheWriteParams g = p;
      g.cache = {gk.view(), gv.view(), want.view.k_scale, want.view.v_scale};
      bool ran = false;
      if (dt == DType::kF32) {
        ran = RunBackend(*k, g);
      } else {
#if defined(PEREGRINE_HAVE_CUDA)
        DeviceMirror m;
        const MlaCacheWriteParams d = Mirror(m, g);
        if (Accepts(*k, d)) {
          RunWith(*k, d);
          m.CopyBack();
          PG_TEST_CUDA(cudaMemcpy(gk.data<uint8_t>(), d.cache.k_cache.data, size_t(gk.nbytes()), cudaMemcpyDeviceToHost));
          PG_TEST_CUDA(cudaMemcpy(gv.data<uint8_t>(), d.cache.v_cache.data, size_t(gv.nbytes()), cudaMemcpyDeviceToHost));
          ran = true;
        }
#endif
      }
      if (!ran) continue;
      cov.Ran(k->backend);
      if (dt == DType::kF32) {  // the device cache is bf16: ref's values (bf16 inputs) exactly
        ExpectExactFor(*k, want.k.data<float>(), gk.data<float>(), gk.numel(), k->backend + " k");
        ExpectExactFor(*k, want.v.data<float>(), gv.data<float>(), gv.numel(), k->backend + " v");
      } else {
        EXPECT_EQ(std::memcmp(want.k.data<uint8_t>(), gk.data<uint8_t>(), size_t(gk.nbytes())), 0) << k->backend;
        EXPECT_EQ(std::memcmp(want.v.data<uint8_t>(), gv.data<uint8_t>(), size_t(gv.nbytes())), 0) << k->backend;
      }
    }
  }
  cov.Check<MlaCacheWriteParams>();
}

}  // namespace
}  // namespace pg::ops::testing
