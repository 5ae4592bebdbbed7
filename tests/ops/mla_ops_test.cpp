// MLA ops (ops_moe.h) in the op harness, DeepSeek latent shape (kv_lora_rank 512, rope 64):
//  * ref: an fp8 e4m3 latent cache stores round_fp8(latent / scale) and attention over it
//    equals attention over an f32 cache holding the dequantized values;
//  * every backend (CUDA: absorbed decode kernel + split-K combine, expanded prefill kernel,
//    cache write) against ref, bf16 and fp8 caches, on mixed batches: decode rows, several
//    query positions per sequence (speculative verification), prefills with and without a
//    cached prefix, odd page sizes, shuffled pages, contexts long enough for split-K;
//  * the fused forms: MlaCacheWrite with its kv norm + k_pe RoPE prologue, MlaAttention with
//    its q RoPE (and, at <= 4 tokens, the CUDA fused q-absorb and combine + W_UV kernels),
//    against ref = the separate reference ops run in order;
//  * ref MlaAttention, expanded, against ops::Attention over an explicitly expanded per-head
//    KV cache (an independent oracle), and absorbed == expanded, on mixed batches with cached
//    prefixes, shuffled pages and an odd latent size (split over the K/V halves).
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <numeric>

#include "core/quant.h"
#include "kernels/ops_moe.h"
#include "kernels/rope_freq.h"
#include "op_test_util.h"
#include "paged_test_util.h"

namespace pg::ops::testing {

#if defined(PEREGRINE_HAVE_CUDA)
// Latent caches: f32 on the host -> bf16 on the device (an activation); fp8 -> the same bytes.
inline KvCacheView MirrorLatent(DeviceMirror& m, const KvCacheView& c, bool copy_back) {
  if (c.k_cache.dtype == DType::kF32)
    return {m.Act(c.k_cache, copy_back), m.Act(c.v_cache, copy_back), c.k_scale, c.v_scale};
  return {m.Raw(c.k_cache), m.Raw(c.v_cache), c.k_scale, c.v_scale};
}
inline MlaCacheWriteParams Mirror(DeviceMirror& m, const MlaCacheWriteParams& p);
inline MlaAttentionParams Mirror(DeviceMirror& m, const MlaAttentionParams& p) {
  // The fused write's device params: one per thread, valid until the next mirror (RunBackend
  // runs the op right after mirroring).
  thread_local MlaCacheWriteParams write;
  MlaAttentionParams d = p;
  if (p.write) {
    write = Mirror(m, *p.write);
    d.write = &write;
  }
  d.q = m.Act(p.q, p.positions.data != nullptr);  // the fused RoPE rotates q in place
  d.out = m.Act(p.out, true);
  d.positions = m.Raw(p.positions);
  d.w_kv_b = m.Raw(p.w_kv_b);
  d.cache = MirrorLatent(m, p.cache, false);
  return d;
}
inline MlaCacheWriteParams Mirror(DeviceMirror& m, const MlaCacheWriteParams& p) {
  // fp8 caches are not copied back by the mirror: MlaCacheWriteMatchesRef reads them itself.
  // The fused prologue rewrites the latent in place.
  MlaCacheWriteParams d = p;
  d.latent = m.Act(p.latent, p.norm_weight.data || p.positions.data);
  d.cache = MirrorLatent(m, p.cache, true);
  d.norm_weight = m.Raw(p.norm_weight);
  d.positions = m.Raw(p.positions);
  return d;
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

// Sequences (q_len, kv_len) over shuffled pages (PagedBatch), plus `full`: the same sequences
// as one "prefill of the whole history" batch (q_len = kv_len) that writes every latent row.
struct Batch : PagedBatch {
  std::vector<int32_t> fq_start, fq_len;
  AttentionBatch full;
  int64_t history = 0;
  Batch(const std::vector<std::pair<int, int>>& seqs, int page_size, int spare_pages = 2)
      : PagedBatch(seqs, page_size, spare_pages) {
    for (int32_t kl : kv_len) {
      fq_start.push_back(int32_t(history)), fq_len.push_back(kl);
      history += kl;
    }
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

// Each new token's position (kv_len - q_len + i), as the model's positions tensor.
Tensor Positions(const Batch& b) {
  Tensor pos(DType::kI32, {b.tokens});
  for (int s = 0; s < b.batch.num_seqs; ++s)
    for (int i = 0; i < b.q_len[size_t(s)]; ++i)
      pos.data<int32_t>()[b.q_start[size_t(s)] + i] = b.kv_len[size_t(s)] - b.q_len[size_t(s)] + i;
  return pos;
}

// The fused prologues of the reference ops against plain loops written here: RMS norm over
// the first kv_lora_rank values, RoPE (angle = float(inv_freq * pos), HF) on the rest / on q's
// rope dims, in place; attention on the rotated q is then the unfused op's result exactly.
TEST(MlaRef, FusedProloguesMatchPlainLoops) {
  PG_SEED_TRACE();
  const int rank = 48, rope = 8, heads = 3, nope = 16, vd = 8;
  Batch b({{1, 37}, {3, 20}}, 8);
  const Tensor pos = Positions(b);
  for (bool neox : {true, false}) {
    SCOPED_TRACE(neox ? "neox" : "interleaved");
    const RopeConfig cfg{.theta = 5000.0f, .neox = neox};
    const std::vector<float> inv = RopeInvFreq(cfg, rope);
    auto rotate = [&](float* x, int32_t p) {  // one head of `rope` values
      for (int i = 0; i < rope / 2; ++i) {
        const int i0 = neox ? i : 2 * i, i1 = neox ? i + rope / 2 : 2 * i + 1;
        const double ang = double(inv[size_t(i)] * float(p)), c = std::cos(ang), sn = std::sin(ang);
        const double x0 = x[i0], x1 = x[i1];
        x[i0] = float(x0 * c - x1 * sn);
        x[i1] = float(x1 * c + x0 * sn);
      }
    };
    // MlaCacheWrite: latent rows normed / rotated in place, then stored (f32 cache: as is).
    Tensor latent = F32({b.tokens, rank + rope}, 2.0f), norm_w = F32({rank}, 0.5f);
    Tensor want(DType::kF32, {b.tokens, rank + rope});
    std::memcpy(want.data<float>(), latent.data<float>(), size_t(latent.nbytes()));
    for (int64_t t = 0; t < b.tokens; ++t) {
      float* r = want.data<float>() + t * (rank + rope);
      double ss = 0;
      for (int i = 0; i < rank; ++i) ss += double(r[i]) * r[i];
      const double inv_rms = 1.0 / std::sqrt(ss / rank + 1e-5);
      for (int i = 0; i < rank; ++i) r[i] = float(r[i] * inv_rms * norm_w.data<float>()[i]);
      rotate(r + rank, pos.data<int32_t>()[t]);
    }
    LatentCache cache(b, DType::kF32, 1.0f, 1.0f, rank, rope);
    MlaCacheWrite({.latent = latent.view(), .cache = cache.view, .batch = &b.batch,
                   .norm_weight = norm_w.view(), .eps = 1e-5f, .kv_lora_rank = rank,
                   .positions = pos.view(), .rope = cfg});
    ExpectClose(want.data<float>(), latent.data<float>(), latent.numel(), {1e-5, 1e-10},
                "latent after the fused prologue");
    // MlaAttention: q's rope dims rotated in place, then the unfused attention on that q.
    Tensor w = F32({heads * (nope + vd), rank}, 0.05f), q = F32({b.tokens, heads, nope + rope});
    Tensor q_rot(DType::kF32, {b.tokens, heads, nope + rope});
    std::memcpy(q_rot.data<float>(), q.data<float>(), size_t(q.nbytes()));
    for (int64_t t = 0; t < b.tokens; ++t)
      for (int h = 0; h < heads; ++h)
        rotate(q_rot.data<float>() + (t * heads + h) * (nope + rope) + nope, pos.data<int32_t>()[t]);
    Tensor o_fused(DType::kF32, {b.tokens, heads, vd}), o_plain(DType::kF32, {b.tokens, heads, vd});
    MlaAttentionParams p{.q = q.view(), .w_kv_b = w.view(), .out = o_fused.view(),
                         .cache = cache.view, .batch = &b.batch, .kv_lora_rank = rank,
                         .rope_dim = rope, .mode = MlaMode::kAbsorbed, .positions = pos.view(),
                         .rope = cfg};
    MlaAttention(p);
    ExpectClose(q_rot.data<float>(), q.data<float>(), q.numel(), {1e-5, 1e-10}, "q after the fused rope");
    p.q = q_rot.view(), p.out = o_plain.view(), p.positions = {};
    MlaAttention(p);
    ExpectClose(o_plain.data<float>(), o_fused.data<float>(), o_fused.numel(), {1e-5, 1e-10},
                "attention with the fused rope");
  }
}

struct Case {
  int heads, nope, v, page_size;
  std::vector<std::pair<int, int>> seqs;  // (q_len, kv_len)
  bool expanded;                          // also run the expanded mode (ref cost)
  int rank = kRank, rope = kRope;
  bool rope_q = false;                    // also run with the fused q RoPE (positions set)
  bool write = false;                     // and the fused cache write (norm + k_pe RoPE)
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
      // <= 4 tokens: the fused q-absorb and combine + W_UV kernels (one split / many splits,
      // 16 and 128 heads, q_len 4 verification), with and without the fused q RoPE.
      {16, 128, 128, 64, {{1, 1000}}, false, kRank, kRope, true, true},
      {16, 128, 128, 16, {{1, 40}}, false, kRank, kRope, true},
      {128, 128, 128, 64, {{1, 2000}, {1, 50}}, false, kRank, kRope, true, true},
      {16, 128, 128, 32, {{4, 300}}, true, kRank, kRope, true, true},
      {4, 32, 24, 4, {{1, 29}, {2, 40}}, false, 64, 16, true, true},  // generic kernel
      {16, 128, 128, 16, {{1, 300}, {4, 77}, {1, 1}, {3, 3}}, true, kRank, kRope, true, true},
  };
  if (Backends<MlaAttentionParams>().empty()) GTEST_SKIP() << "no MlaAttention backend besides ref";
  Coverage cov;
  for (const Case& c : cases) {
    for (DType dt : {DType::kF32, DType::kF8E4M3}) {
      for (MlaMode mode : {MlaMode::kAbsorbed, MlaMode::kExpanded}) {
        if (mode == MlaMode::kExpanded && !c.expanded) continue;
        // The fused write only with bf16 caches: ref quantizes its f32 prologue output to fp8,
        // the device its bf16 one (as the separate ops), so a few new latents differ by one
        // e4m3 step, which attention over rows of mostly new keys magnifies past the bound;
        // FusedNormRopeMatchesRef checks the fp8 write itself (within one step).
        const bool with_write = c.write && dt == DType::kF32;
        const std::string what =
            fmt::format("heads {} nope {} v {} rank {} rope {} page {} cache {} {}{}{}", c.heads,
                        c.nope, c.v, c.rank, c.rope, c.page_size, dt == DType::kF32 ? "bf16" : "fp8",
                        mode == MlaMode::kAbsorbed ? "absorbed" : "expanded",
                        c.rope_q ? " +q rope" : "", with_write ? " +cache write" : "");
        SCOPED_TRACE(what);
        Batch b(c.seqs, c.page_size);
        LatentCache cache(b, dt, dt == DType::kF32 ? 1.0f : 0.125f,
                          dt == DType::kF32 ? 1.0f : 0.0625f, c.rank, c.rope);
        Tensor w = Bf16Weight(c.heads * (c.nope + c.v), c.rank, 0.05f);
        Tensor q = F32({b.tokens, c.heads, c.nope + c.rope});
        RoundToBf16(q);
        Tensor ref_out(DType::kF32, {b.tokens, c.heads, c.v}), got(DType::kF32, {b.tokens, c.heads, c.v});
        const Tensor pos = Positions(b);
        MlaAttentionParams p{.q = q.view(), .w_kv_b = w.view(), .out = ref_out.view(),
                             .cache = cache.view, .batch = &b.batch, .kv_lora_rank = c.rank,
                             .rope_dim = c.rope, .scale = 0.8f / std::sqrt(float(c.nope + c.rope)),
                             .mode = mode};
        if (c.rope_q) {
          p.positions = pos.view();
          p.rope = {.theta = 10000.0f, .neox = c.page_size % 32 == 0};  // both pairings
        }
        // The fused write: the new tokens' latents (normed and rotated by the op) replace the
        // rows LatentCache wrote at their positions.
        Tensor latent = F32({b.tokens, c.rank + c.rope}, 2.0f), norm_w = F32({c.rank}, 0.2f);
        RoundToBf16(latent);
        for (int64_t i = 0; i < c.rank; ++i) norm_w.data<float>()[i] += 1.0f;
        const MlaCacheWriteParams write{.latent = latent.view(), .cache = cache.view,
                                        .batch = &b.batch, .norm_weight = norm_w.view(),
                                        .eps = 1e-6f, .kv_lora_rank = c.rank,
                                        .positions = pos.view(), .rope = p.rope};
        if (with_write) p.write = &write;
        // ref rotates q, norms / rotates the latent and writes the cache, all in place.
        const std::vector<uint8_t> q0 = Bytes(q), lat0 = Bytes(latent), k0 = Bytes(cache.k),
                                   v0 = Bytes(cache.v);
        RunWith(RefImpl<MlaAttentionParams>(), p);
        const std::vector<uint8_t> q_ref = Bytes(q);
        for (const auto* k : Backends<MlaAttentionParams>()) {
          got.Zero();
          p.out = got.view();
          std::memcpy(q.data<uint8_t>(), q0.data(), q0.size());
          std::memcpy(latent.data<uint8_t>(), lat0.data(), lat0.size());
          std::memcpy(cache.k.data<uint8_t>(), k0.data(), k0.size());
          std::memcpy(cache.v.data<uint8_t>(), v0.data(), v0.size());
          if (!RunBackend(*k, p)) continue;
          cov.Ran(k->backend);
          ExpectClose(ref_out.data<float>(), got.data<float>(), got.numel(), kBf16Attention,
                      k->backend + " " + what);
          if (c.rope_q)  // the rotated q, as a separate Rope leaves it
            ExpectClose(reinterpret_cast<const float*>(q_ref.data()), q.data<float>(), q.numel(),
                        kBf16, k->backend + " rotated q " + what);
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

// The fused prologue (kv_a norm + k_pe RoPE, in place) then the write, against ref's
// RmsNorm; Rope; MlaCacheWrite. The device rounds the normed / rotated values to bf16 (and
// the cache to fp8) as the separate kernels do; ref keeps f32, so values are compared at bf16
// tolerance (fp8: dequantized, within one e4m3 step of ref's).
TEST(MlaCacheWriteOp, FusedNormRopeMatchesRef) {
  PG_SEED_TRACE();
  Coverage cov;
  struct Shape {
    int rank, rope;
    bool norm, rope_on, neox;
  };
  for (const Shape sh : {Shape{kRank, kRope, true, true, false}, Shape{kRank, kRope, true, false, true},
                         Shape{kRank, kRope, false, true, true}, Shape{48, 8, true, true, true}}) {
    for (DType dt : {DType::kF32, DType::kF8E4M3}) {
      const std::string what = fmt::format("rank {} rope {} norm {} rope {} neox {} {} cache",
                                           sh.rank, sh.rope, sh.norm, sh.rope_on, sh.neox,
                                           dt == DType::kF32 ? "bf16" : "fp8");
      SCOPED_TRACE(what);
      Batch b({{1, 40}, {5, 9}, {3, 3}, {1, 2000}}, 16);
      LatentCache want(b, dt, 1.0f, 1.0f, sh.rank, sh.rope);
      if (dt == DType::kF8E4M3) want.view.k_scale = 0.5f, want.view.v_scale = 0.25f;
      const int64_t L = sh.rank + sh.rope, half = MlaCacheHalfDim(sh.rank, sh.rope);
      // Values about the rms: the bf16 bound (max error / rms) then holds for the rotated ones.
      Tensor latent = F32({b.tokens, L}, 1.0f);
      RoundToBf16(latent);
      Tensor norm_w = F32({sh.rank}, 0.3f);
      for (int64_t i = 0; i < sh.rank; ++i) norm_w.data<float>()[i] += 1.0f;
      const Tensor pos = Positions(b);
      const std::vector<uint8_t> k0 = Bytes(want.k), v0 = Bytes(want.v), lat0 = Bytes(latent);
      MlaCacheWriteParams p{.latent = latent.view(), .cache = want.view, .batch = &b.batch};
      p.kv_lora_rank = sh.rank;
      p.eps = 1e-6f;
      if (sh.norm) p.norm_weight = norm_w.view();
      if (sh.rope_on) p.positions = pos.view(), p.rope = {.theta = 10000.0f, .neox = sh.neox};
      RunWith(RefImpl<MlaCacheWriteParams>(), p);
      const std::vector<uint8_t> lat_ref = Bytes(latent);
      // Cache contents as real values (f32 caches as stored; fp8 dequantized).
      auto values = [&](const Tensor& t, float scale) {
        std::vector<float> out(size_t(t.numel()));
        for (int64_t i = 0; i < t.numel(); ++i)
          out[size_t(i)] = t.dtype() == DType::kF32 ? t.data<float>()[i]
                                                    : F8E4M3ToF32(t.data<uint8_t>()[i]) * scale;
        return out;
      };
      const std::vector<float> wk = values(want.k, want.view.k_scale), wv = values(want.v, want.view.v_scale);
      for (const auto* k : Backends<MlaCacheWriteParams>()) {
        Tensor gk(want.k.dtype(), {b.num_pages, b.batch.page_size, 1, half}),
            gv(want.v.dtype(), {b.num_pages, b.batch.page_size, 1, half});
        std::memcpy(gk.data<uint8_t>(), k0.data(), k0.size());
        std::memcpy(gv.data<uint8_t>(), v0.data(), v0.size());
        std::memcpy(latent.data<uint8_t>(), lat0.data(), lat0.size());
        MlaCacheWriteParams g = p;
        g.cache = {gk.view(), gv.view(), want.view.k_scale, want.view.v_scale};
        bool ran = false;
#if defined(PEREGRINE_HAVE_CUDA)
        if (dt == DType::kF8E4M3) {
          DeviceMirror m;
          const MlaCacheWriteParams d = Mirror(m, g);
          if (Accepts(*k, d)) {
            RunWith(*k, d);
            m.CopyBack();
            PG_TEST_CUDA(cudaMemcpy(gk.data<uint8_t>(), d.cache.k_cache.data, size_t(gk.nbytes()), cudaMemcpyDeviceToHost));
            PG_TEST_CUDA(cudaMemcpy(gv.data<uint8_t>(), d.cache.v_cache.data, size_t(gv.nbytes()), cudaMemcpyDeviceToHost));
            ran = true;
          }
        }
#endif
        if (dt == DType::kF32) ran = RunBackend(*k, g);
        if (!ran) continue;
        cov.Ran(k->backend);
        ExpectClose(reinterpret_cast<const float*>(lat_ref.data()), latent.data<float>(),
                    latent.numel(), kBf16, k->backend + " latent in place");
        const std::vector<float> gkv = values(gk, want.view.k_scale), gvv = values(gv, want.view.v_scale);
        if (dt == DType::kF32) {
          ExpectClose(wk.data(), gkv.data(), int64_t(wk.size()), kBf16, k->backend + " k cache");
          ExpectClose(wv.data(), gvv.data(), int64_t(wv.size()), kBf16, k->backend + " v cache");
        } else {  // within one e4m3 step (2^-3 relative) of ref's stored value
          for (const auto* pr : {&wk, &wv}) {
            const std::vector<float>& ref = *pr;
            const std::vector<float>& got = pr == &wk ? gkv : gvv;
            int64_t bad = 0;
            for (size_t i = 0; i < ref.size(); ++i)
              if (std::fabs(got[i] - ref[i]) > 0.126f * std::fabs(ref[i]) + 2e-3f) ++bad;
            EXPECT_EQ(bad, 0) << k->backend << (pr == &wk ? " k" : " v") << " fp8 cache";
          }
        }
      }
    }
  }
  cov.Check<MlaCacheWriteParams>();
}

// ---- MLA -----------------------------------------------------------------------------------

struct MlaCase {
  int heads, nope, rope, v, rank, page_size;
  std::vector<std::pair<int, int>> seqs;  // (q_len, kv_len)
};

TEST(MlaAttentionOp, ExpandedMatchesAttentionOverExpandedCacheAndAbsorbedMatchesExpanded) {
  PG_SEED_TRACE();
  const std::vector<MlaCase> cases = {
      {3, 13, 6, 11, 19, 5, {{1, 40}, {17, 30}, {9, 9}, {1, 1}}},
      {4, 32, 16, 24, 64, 16, {{37, 37}, {1, 100}}},
      {2, 24, 8, 32, 48, 7, {{3, 20}, {1, 64}}},  // v_dim > nope_dim
  };
  for (const MlaCase& c : cases) {
    SCOPED_TRACE(fmt::format("heads {} nope {} rope {} v {} rank {} page {}", c.heads, c.nope,
                             c.rope, c.v, c.rank, c.page_size));
    Batch mb(c.seqs, c.page_size, /*spare_pages=*/3);
    const int64_t qk = c.nope + c.rope, latent_dim = c.rank + c.rope;
    const int64_t half = MlaCacheHalfDim(c.rank, c.rope);
    Tensor kc(DType::kF32, {mb.num_pages, c.page_size, 1, half}),
        vc(DType::kF32, {mb.num_pages, c.page_size, 1, half});
    FillNormal(kc);  // stale contents outside the written slots must not matter
    FillNormal(vc);
    KvCacheView cache{kc.view(), vc.view()};
    // Write the whole history of each sequence (as earlier steps would have).
    const AttentionBatch& full = mb.full;
    const int64_t hist = mb.history;
    Tensor latent = F32({hist, latent_dim});
    MlaCacheWrite({.latent = latent.view(), .cache = cache, .batch = &full});
    Tensor wkvb = F32({c.heads * (c.nope + c.v), c.rank}, 0.3f);
    Tensor q = F32({mb.tokens, c.heads, qk});
    const float scale = 0.7f / std::sqrt(float(qk));
    Tensor out_exp(DType::kF32, {mb.tokens, c.heads, c.v}), out_abs(DType::kF32, {mb.tokens, c.heads, c.v});
    MlaAttentionParams p{.q = q.view(), .w_kv_b = wkvb.view(), .out = out_exp.view(),
                         .cache = cache, .batch = &mb.batch, .kv_lora_rank = c.rank,
                         .rope_dim = c.rope, .scale = scale, .mode = MlaMode::kExpanded};
    MlaAttention(p);
    p.out = out_abs.view();
    p.mode = MlaMode::kAbsorbed;
    MlaAttention(p);
    ExpectClose(out_exp.data<float>(), out_abs.data<float>(), out_abs.numel(), {1e-5, 1e-11},
                "absorbed vs expanded");

    // Oracle: a standard per-head paged cache with K = [W_UK c_kv, k_pe] and
    // V = [W_UV c_kv, 0...] (padded to a common head dim), through ops::Attention (ref).
    const int64_t d = std::max<int64_t>(qk, c.v);
    Tensor k_full(DType::kF32, {hist, c.heads, d}), v_full(DType::kF32, {hist, c.heads, d});
    k_full.Zero();
    v_full.Zero();
    for (int64_t t = 0; t < hist; ++t)
      for (int h = 0; h < c.heads; ++h) {
        const float* lat = latent.data<float>() + t * latent_dim;
        for (int64_t r = 0; r < c.nope + c.v; ++r) {
          double acc = 0;
          for (int cc = 0; cc < c.rank; ++cc)
            acc += double(wkvb.data<float>()[(h * (c.nope + c.v) + r) * c.rank + cc]) * lat[cc];
          if (r < c.nope) k_full.data<float>()[(t * c.heads + h) * d + r] = float(acc);
          else v_full.data<float>()[(t * c.heads + h) * d + (r - c.nope)] = float(acc);
        }
        for (int r = 0; r < c.rope; ++r)
          k_full.data<float>()[(t * c.heads + h) * d + c.nope + r] = lat[c.rank + r];
      }
    Tensor kc2(DType::kF32, {mb.num_pages, c.page_size, c.heads, d}),
        vc2(DType::kF32, {mb.num_pages, c.page_size, c.heads, d});
    KvCacheView cache2{kc2.view(), vc2.view()};
    SetMaxKernelPriority(kPriorityRef);
    KvWrite({.k = k_full.view(), .v = v_full.view(), .cache = cache2, .batch = &full});
    Tensor q2(DType::kF32, {mb.tokens, c.heads, d}), o2(DType::kF32, {mb.tokens, c.heads, d});
    q2.Zero();
    for (int64_t i = 0; i < mb.tokens * c.heads; ++i)
      std::copy_n(q.data<float>() + i * qk, qk, q2.data<float>() + i * d);
    Attention({.q = q2.view(), .out = o2.view(), .cache = cache2, .batch = &mb.batch,
               .scale = scale});
    SetMaxKernelPriority(std::numeric_limits<int>::max());
    std::vector<float> want(static_cast<size_t>(mb.tokens * c.heads * c.v));
    for (int64_t i = 0; i < mb.tokens * c.heads; ++i)
      std::copy_n(o2.data<float>() + i * d, c.v, want.data() + i * c.v);
    ExpectClose(want.data(), out_exp.data<float>(), out_exp.numel(), {1e-5, 1e-11},
                "expanded vs per-head attention");
  }
}

// Batch invariance (batch_invariance_test.cpp's rule) of the CPU backends: each sequence's
// rows, run as a batch of that sequence alone, and its last row alone (other query blocks,
// head groups and task splits), are bitwise the rows of the whole batch, both modes, f32 and
// fp8 caches, f32 (the model's) and bf16 w_kv_b.
TEST(MlaAttentionOp, CpuRowsDoNotDependOnTheBatch) {
  PG_SEED_TRACE();
  std::vector<const KernelImpl<MlaAttentionParams>*> cpu;
  for (const auto* k : Backends<MlaAttentionParams>())
    if (k->device == Device::kCpu) cpu.push_back(k);
  if (cpu.empty()) GTEST_SKIP() << "no CPU MlaAttention backend besides ref";
  constexpr int kHeads = 16, kNope = 128, kV = 128;
  Batch all({{1, 150}, {5, 90}, {33, 200}, {1, 1}, {20, 20}}, 16);
  for (const auto* k : cpu)
    for (DType cache_dt : {DType::kF32, DType::kF8E4M3})
      for (bool f32_w : {true, false})
        for (MlaMode mode : {MlaMode::kAbsorbed, MlaMode::kExpanded}) {
          SCOPED_TRACE(fmt::format("{} cache {} w_kv_b {} {}", k->backend, Name(cache_dt),
                                   f32_w ? "f32" : "bf16",
                                   mode == MlaMode::kAbsorbed ? "absorbed" : "expanded"));
          LatentCache cache(all, cache_dt, 1.0f, cache_dt == DType::kF32 ? 1.0f : 0.5f);
          Tensor w = Bf16Weight(kHeads * (kNope + kV), kRank, 0.05f);
          if (f32_w) {
            Tensor f(DType::kF32, {kHeads * (kNope + kV), kRank});
            for (int64_t i = 0; i < w.numel(); ++i)
              f.data<float>()[i] = Bf16ToF32(w.data<uint16_t>()[i]);
            w = std::move(f);
          }
          Tensor q = F32({all.tokens, kHeads, kNope + kRope});
          Tensor whole(DType::kF32, {all.tokens, kHeads, kV});
          MlaAttentionParams p{.q = q.view(),
                               .w_kv_b = w.view(),
                               .out = whole.view(),
                               .cache = cache.view,
                               .batch = &all.batch,
                               .kv_lora_rank = kRank,
                               .rope_dim = kRope,
                               .mode = mode};
          ASSERT_TRUE(RunBackend(*k, p));
          const int64_t row_floats = kHeads * kV;
          for (int s = 0; s < all.batch.num_seqs; ++s) {
            const int32_t q0 = all.q_start[size_t(s)], ql = all.q_len[size_t(s)];
            for (int32_t first : {0, ql - 1}) {  // the sequence's rows, then its last row alone
              const std::vector<int32_t> start{0}, len{ql - first}, kv{all.kv_len[size_t(s)]},
                  page{all.page_start[size_t(s)]};
              const AttentionBatch one{1,    all.batch.page_size, start, len, kv,
                                       page, all.page_table};
              Tensor got(DType::kF32, {ql - first, kHeads, kV});
              MlaAttentionParams p1 = p;
              p1.q = q.view().Slice0(q0 + first, ql - first);
              p1.out = got.view();
              p1.batch = &one;
              ASSERT_TRUE(RunBackend(*k, p1));
              EXPECT_EQ(
                  std::memcmp(got.data<float>(), whole.data<float>() + (q0 + first) * row_floats,
                              size_t(got.nbytes())),
                  0)
                  << "sequence " << s << " rows from " << first;
            }
          }
        }
}

// The split weight form as llama.cpp stores it (ops_moe.h): Q8_0 w_k_b [heads, rank, nope]
// and w_v_b [heads, v, rank], and the joined f32 w_kv_b holding their dequantized values
// (joined here by plain loops: row h * (nope + v) + e is w_k_b[h][:, e], the next v rows w_v_b[h]).
struct SplitQ8Weight {
  Tensor k_b, v_b, joined;
  SplitQ8Weight(int heads, int nope, int v, int rank)
      : k_b(DType::kQ8_0, {heads, rank, nope}),
        v_b(DType::kQ8_0, {heads, v, rank}),
        joined(DType::kF32, {heads * (nope + v), rank}) {
    Tensor kf = F32({heads, rank, nope}, 0.05f), vf = F32({heads, v, rank}, 0.05f);
    quant::QuantizeRow(DType::kQ8_0, kf.data<float>(), k_b.data<void>(), kf.numel());
    quant::QuantizeRow(DType::kQ8_0, vf.data<float>(), v_b.data<void>(), vf.numel());
    quant::DequantizeRow(DType::kQ8_0, k_b.data<void>(), kf.data<float>(), kf.numel());
    quant::DequantizeRow(DType::kQ8_0, v_b.data<void>(), vf.data<float>(), vf.numel());
    float* w = joined.data<float>();
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t r = 0; r < nope + v; ++r)
        for (int64_t c = 0; c < rank; ++c)
          w[(h * (nope + v) + r) * rank + c] =
              r < nope ? kf.data<float>()[(h * rank + c) * nope + r]
                       : vf.data<float>()[(h * v + r - nope) * rank + c];
  }
};

// Every CPU backend (and ref) reads the split Q8_0 form as the f32 matrix of its values:
// the same bits, absorbed and expanded, f32 and fp8 caches, one and several query rows per
// head and sequence.
TEST(MlaAttentionOp, SplitQ8WeightGivesTheBitsOfItsF32Values) {
  PG_SEED_TRACE();
  std::vector<const KernelImpl<MlaAttentionParams>*> cpu{&RefImpl<MlaAttentionParams>()};
  for (const auto* k : Backends<MlaAttentionParams>())
    if (k->device == Device::kCpu) cpu.push_back(k);
  const std::vector<Case> cases = {
      {16, 128, 128, 16, {{1, 150}, {5, 90}, {1, 1}, {20, 20}}, true},  // V2-Lite
      {4, 32, 32, 4, {{1, 29}, {17, 40}, {3, 3}}, true, 64, 16},        // tiny deepseek2
  };
  for (const Case& c : cases) {
    Batch b(c.seqs, c.page_size);
    SplitQ8Weight w(c.heads, c.nope, c.v, c.rank);
    for (DType cache_dt : {DType::kF32, DType::kF8E4M3}) {
      LatentCache cache(b, cache_dt, 1.0f, cache_dt == DType::kF32 ? 1.0f : 0.5f, c.rank, c.rope);
      for (MlaMode mode : {MlaMode::kAbsorbed, MlaMode::kExpanded})
        for (const auto* k : cpu) {
          if (k->device != Device::kCpu || (k->backend == "ref" && c.heads > 4)) continue;
          SCOPED_TRACE(fmt::format("{} heads {} cache {} {}", k->backend, c.heads,
                                   Name(cache_dt),
                                   mode == MlaMode::kAbsorbed ? "absorbed" : "expanded"));
          Tensor q = F32({b.tokens, c.heads, c.nope + c.rope});
          Tensor split(DType::kF32, {b.tokens, c.heads, c.v}), f32(DType::kF32, {b.tokens, c.heads, c.v});
          MlaAttentionParams p{.q = q.view(), .w_k_b = w.k_b.view(), .w_v_b = w.v_b.view(),
                               .out = split.view(), .cache = cache.view, .batch = &b.batch,
                               .kv_lora_rank = c.rank, .rope_dim = c.rope, .mode = mode};
          ASSERT_TRUE(RunBackend(*k, p));
          p.w_k_b = p.w_v_b = TensorView{};
          p.w_kv_b = w.joined.view();
          p.out = f32.view();
          ASSERT_TRUE(RunBackend(*k, p));
          int64_t nonzero = 0;
          for (int64_t i = 0; i < f32.numel(); ++i) {
            ASSERT_TRUE(std::isfinite(f32.data<float>()[i]));
            nonzero += f32.data<float>()[i] != 0.0f;
          }
          EXPECT_GT(nonzero, f32.numel() / 2);
          for (int64_t i = 0; i < f32.numel(); ++i)
            ASSERT_EQ(std::bit_cast<uint32_t>(split.data<float>()[i]),
                      std::bit_cast<uint32_t>(f32.data<float>()[i]))
                << "element " << i << ": " << split.data<float>()[i] << " vs "
                << f32.data<float>()[i];
        }
    }
  }
}

TEST(MlaAttentionOp, RejectsMismatchedCache) {
  Batch mb({{2, 4}}, 4, /*spare_pages=*/3);
  Tensor kc(DType::kF32, {mb.num_pages, 4, 1, 10}), vc(DType::kF32, {mb.num_pages, 4, 1, 10});
  Tensor q = F32({2, 2, 12}), out(DType::kF32, {2, 2, 8}), w = F32({2 * (8 + 8), 16});
  // latent 16 + 4 = 20 -> half 10: fine; rank 17 -> half 11: mismatched.
  MlaAttentionParams p{.q = q.view(), .w_kv_b = w.view(), .out = out.view(),
                       .cache = {kc.view(), vc.view()}, .batch = &mb.batch, .kv_lora_rank = 16,
                       .rope_dim = 4};
  EXPECT_NO_THROW(MlaAttention(p));
  // One weight form: not both, not a half of the split one.
  Tensor k_b = F32({2, 16, 8}), v_b = F32({2, 8, 16}), v_b_t = F32({2, 16, 8});
  p.w_k_b = k_b.view();
  p.w_v_b = v_b.view();
  EXPECT_THROW(MlaAttention(p), Error);
  p.w_kv_b = TensorView{};
  EXPECT_NO_THROW(MlaAttention(p));
  p.w_v_b = TensorView{};
  EXPECT_THROW(MlaAttention(p), Error);
  p.w_v_b = v_b_t.view();  // [heads, rank, v]: transposed
  EXPECT_THROW(MlaAttention(p), Error);
  p.w_v_b = v_b.view();
  p.kv_lora_rank = 17;
  EXPECT_THROW(MlaAttention(p), Error);
}

}  // namespace
}  // namespace pg::ops::testing
