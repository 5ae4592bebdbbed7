// Decode attention, fp8 e4m3 KV caches and the fused RoPE + KV write, every backend against
// ref/ on awkward shapes: kv_len 1 and page boundaries, group sizes 1/3/4/5/8, head dims
// 32/64/80/96/128/256, page sizes 8/16/24, sliding window, softcap, long histories (many
// split-K splits). fp8 references are checked against the f32 cache at a tolerance derived
// from e4m3's precision (independent oracle of the fp8 path of ref/ itself).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <tuple>

#include "op_test_util.h"
#include "paged_test_util.h"

#if defined(PEREGRINE_HAVE_CUDA)
#include <cuda_runtime.h>

#include "core/env.h"
#include "kernels/cuda/batch_plan.h"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/device_params.h"
#endif

namespace pg::ops::testing {
namespace {

constexpr Tolerance kAttention{1e-4, 1e-9};  // f32 backends (as attention_test.cpp)
// e4m3 keeps 3 mantissa bits: a stored value is within u = 2^-4 of the real one (relative).
// Attention output through quantized k (logit error) and v: nmse <= (2u)^2, and max_rel <= 8u
// where every row averages many keys.
constexpr double kE4m3U = 1.0 / 16;
// Rows attending to a few keys (a prefill's first rows; decode rows of kv_len 1-3, where out
// is one or a few v rows): |out| reaches max|v| ~ 10-14x rms(out) of a batch whose other rows
// average thousands of keys, and such a row's error is up to u |out|, so the max error
// relative to rms reaches ~14u (seen: 0.548 with prefill rows, seed 1412776836; 0.717 =
// |-9.5 -> -10| / 0.698 on a kv_len-1 stream case, seed 3965970594): 16u. nmse stays (2u)^2,
// the tight check. DecodeCases have such rows too (kv_len 1 in most): seed 613 put a -8.5
// v (-> -8 in e4m3) alone behind a kv_len-1 row of the MHA case, 0.527 of rms > 8u.
constexpr Tolerance kFp8VsF32FewKeys{16 * kE4m3U, 4 * kE4m3U * kE4m3U};



struct DecodeCase {
  int heads, kv_heads, head_dim, page_size;
  std::vector<int> kv_lens;  // one query per sequence
  int window = 0;
  float softcap = 0;
  std::string Name() const {
    return fmt::format("{}:{} d={} page={} seqs={} max_kv={} window={} softcap={}", heads, kv_heads,
                       head_dim, page_size, kv_lens.size(),
                       *std::max_element(kv_lens.begin(), kv_lens.end()), window, softcap);
  }
};

std::vector<DecodeCase> DecodeCases() {
  return {
      {32, 8, 128, 16, {1, 15, 16, 17, 33, 1000}},          // Llama-3-8B geometry, page edges
      {32, 8, 128, 16, {5000}},                             // one long history: many splits
      {9, 3, 64, 16, {1, 2, 31, 32, 300}},                  // group 3
      {8, 1, 64, 8, {7, 8, 9, 777}},                        // group 8: two head chunks
      {4, 4, 128, 24, {1, 23, 24, 25, 200}},                // MHA, page 24
      {10, 2, 80, 16, {3, 100, 129}},                       // group 5, d 80
      {12, 2, 96, 8, {64, 65, 1}},                          // group 6, d 96
      {8, 2, 256, 16, {300, 17}},                           // d 256
      {4, 2, 32, 16, {40, 1}},                              // d 32 (tiny test models)
      {32, 8, 128, 16, {1, 700, 2049}, 100},                // sliding window
      {16, 4, 64, 16, {1, 333}, 0, 30.0f},                  // softcap
  };
}

// Runs ref and every other backend on one decode case with caches of `cache_dtype`
// (kF32, or kF8E4M3 holding value / scale); returns ref's output. device_batch: device
// backends only, given this batch instead (same rows, another host plan; see
// SplitPlanForLongerContexts).
std::vector<float> CheckDecodeCase(const DecodeCase& c, DType cache_dtype, Coverage& cov,
                                   const Tensor& q, const Tensor& kc32, const Tensor& vc32,
                                   const PagedBatch& pb, float k_scale, float v_scale,
                                   const AttentionBatch* device_batch = nullptr) {
  Tensor kc(cache_dtype, {pb.num_pages, c.page_size, c.kv_heads, c.head_dim});
  Tensor vc(cache_dtype, {pb.num_pages, c.page_size, c.kv_heads, c.head_dim});
  if (cache_dtype == DType::kF8E4M3) {
    Quantize(kc32, kc, k_scale);
    Quantize(vc32, vc, v_scale);
  } else {
    std::copy(kc32.data<float>(), kc32.data<float>() + kc32.numel(), kc.data<float>());
    std::copy(vc32.data<float>(), vc32.data<float>() + vc32.numel(), vc.data<float>());
    k_scale = v_scale = 1.0f;
  }
  Tensor ref(DType::kF32, {pb.tokens, c.heads, c.head_dim});
  AttentionParams p{q.view(), ref.view(), {kc.view(), vc.view(), k_scale, v_scale}, &pb.batch,
                    0.0f, c.window, c.softcap};
  RunWith(RefImpl<AttentionParams>(), p);
  for (const auto* k : Backends<AttentionParams>()) {
    if (device_batch != nullptr && !OnDevice(*k)) continue;
    Tensor out(DType::kF32, {pb.tokens, c.heads, c.head_dim});
    p.out = out.view();
    p.batch = device_batch != nullptr ? device_batch : &pb.batch;
    if (!RunBackend(*k, p)) continue;
    cov.Ran(k->backend);
    ExpectClose(ref.data<float>(), out.data<float>(), out.numel(),
                OnDevice(*k) ? kBf16Attention : kAttention,
                fmt::format("{} cache {}", k->backend, Info(cache_dtype).name));
  }
  return Copy(ref);
}

// One decode case with random bf16-valued q / K / V, checked with an f32 cache and an fp8
// cache (scales that put the values well inside e4m3's range), then the two reference outputs
// against each other within `fp8_vs_f32`.
// Random bf16-valued inputs of a case on batch pb: q ~ N(0, 1), the caches ~ N(0, k_std) /
// N(0, v_std) (drawn in that order).
struct DecodeInputs {
  Tensor q, kc, vc;
  DecodeInputs(const DecodeCase& c, const PagedBatch& pb, float k_std, float v_std)
      : q(DType::kF32, {pb.tokens, c.heads, c.head_dim}),
        kc(DType::kF32, {pb.num_pages, c.page_size, c.kv_heads, c.head_dim}),
        vc(DType::kF32, {pb.num_pages, c.page_size, c.kv_heads, c.head_dim}) {
    FillNormal(q);
    FillNormal(kc, 0.0f, k_std);
    FillNormal(vc, 0.0f, v_std);
    for (const Tensor* t : {&q, &kc, &vc}) RoundToBf16(*t);
  }
};

void CheckDecodeBatchBothCaches(const DecodeCase& c, const PagedBatch& pb, Coverage& cov,
                                const Tolerance& fp8_vs_f32) {
  const DecodeInputs in(c, pb, 0.5f, 2.0f);
  const std::vector<float> f32 = CheckDecodeCase(c, DType::kF32, cov, in.q, in.kc, in.vc, pb, 1, 1);
  const std::vector<float> f8 =
      CheckDecodeCase(c, DType::kF8E4M3, cov, in.q, in.kc, in.vc, pb, 0.5f / 64, 2.0f / 64);
  ExpectClose(f32.data(), f8.data(), int64_t(f8.size()), fp8_vs_f32, "ref fp8 vs f32 cache");
}

// The case's own batch: one decode token per kv length.
void CheckDecodeCaseBothCaches(const DecodeCase& c, Coverage& cov, const Tolerance& fp8_vs_f32) {
  std::vector<std::pair<int, int>> seqs;
  for (int kl : c.kv_lens) seqs.push_back({1, kl});
  CheckDecodeBatchBothCaches(c, PagedBatch(seqs, c.page_size), cov, fp8_vs_f32);
}

TEST(DecodeAttention, EveryBackendMatchesReferenceBf16AndFp8) {
  PG_SEED_TRACE();
  Coverage cov;
  for (const DecodeCase& c : DecodeCases()) {
    SCOPED_TRACE(c.Name());
    CheckDecodeCaseBothCaches(c, cov, kFp8VsF32FewKeys);  // (kv_len-1 rows: see the bound)
  }
  cov.Check<AttentionParams>();
}

// Shapes of the streaming decode kernel (cuda/attention/decode_stream.cu: a block per
// (sequence, split) over every kv head, a bulk-copy ring of 16-key tiles, warps_per_head =
// 8 / kv_heads consumer warps per head): kv heads 1 / 2 / 4 / 6 / 8, groups 1-16, pages
// 8 / 16 / 24 / 32 (tiles straddling pages: one copy per page run), batches past 8 with
// mixed lengths at every tile and page edge, kv_len 1, and long histories (many splits).
std::vector<DecodeCase> StreamCases() {
  return {
      // Qwen3-30B-A3B geometry (4 kv heads, group 8: two warps a head).
      {32, 4, 128, 16, {1, 16, 17, 4095, 6000}},
      // 19 rows, Llama-3-8B geometry: past the fused kernel's batch 8.
      {32, 8, 128, 16, {1, 2, 3, 15, 16, 17, 31, 32, 33, 100, 255, 256, 257, 1000, 1023,
                        1024, 1025, 2048, 3001}},
      {32, 8, 128, 32, {1, 31, 32, 33, 700}},           // page 32: two tiles a page
      {32, 8, 128, 8, {7, 8, 9, 500}},                  // page 8: two copies a tile
      {16, 8, 64, 24, {23, 24, 25, 600}},               // page 24: tiles straddle pages
      {16, 1, 128, 16, {1, 100, 2000}},                 // group 16, one kv head: 8 warps
      {14, 2, 64, 16, {5, 300, 1500}},                  // group 7, 4 warps a head
      {12, 6, 128, 16, {40, 900}},                      // 6 kv heads: 6 consumer warps
      {8, 8, 128, 16, {1, 64, 1000}},                   // MHA (group 1)
      {32, 8, 128, 16, {1, 700, 2049}, 100},            // sliding window (unaligned splits)
      {16, 4, 64, 16, {1, 333}, 0, 30.0f},              // softcap
  };
}

TEST(DecodeAttention, StreamKernelShapesMatchReference) {
  PG_SEED_TRACE();
  Coverage cov;
  for (const DecodeCase& c : StreamCases()) {
    SCOPED_TRACE(c.Name());
#if defined(PEREGRINE_HAVE_CUDA)
    if (cuda::DeviceCount() > 0 && EnvInt("PG_DECODE_STREAM", 1) != 0) {
      cuda::AttentionArgs a{};
      a.heads = c.heads, a.kv_heads = c.kv_heads, a.head_dim = c.head_dim;
      for (cuda::KvType kt : {cuda::KvType::kBF16, cuda::KvType::kF8E4M3}) {
        a.kv_type = kt;
        EXPECT_TRUE(cuda::DecodeStreamRuns(a)) << "not the streaming kernel's shape";
      }
    }
#endif
    CheckDecodeCaseBothCaches(c, cov, kFp8VsF32FewKeys);
  }
  cov.Check<AttentionParams>();
}

#if defined(PEREGRINE_HAVE_CUDA)
// A split plan made for longer contexts than the batch holds, as a decode graph captured at
// 32K and replayed at shorter lengths: the host batch the launcher plans from says
// plan_lens, the device plan the kernels read holds the real lengths. The kernels pick their
// active splits from the real lengths (surplus split blocks exit; one active split writes
// the output directly). Device backends against ref on the real lengths, bf16 and fp8.
TEST(DecodeAttention, SplitPlanForLongerContexts) {
  PG_SEED_TRACE();
  struct PlanCase {
    DecodeCase c;
    int plan_len;  // every sequence's kv_len in the host plan
  };
  const std::vector<PlanCase> cases = {
      {{32, 8, 128, 16, {1024}}, 32768},                     // batch 1: 1K on a 32K graph
      {{32, 8, 128, 16, {5}}, 32768},                        // one active split: direct write
      {{32, 8, 128, 16, {1, 17, 64, 65, 1000, 3000}}, 32768},
      // 8 rows: the 32K plan has more splits than one wave; short rows stay in one wave,
      // long ones take every split.
      {{32, 8, 128, 16, {1024, 1000, 17, 5000, 20000, 300, 64, 1}}, 32768},
      {{16, 4, 64, 16, {33, 200, 4000}}, 8192},
      {{10, 2, 80, 16, {3, 100, 129, 700}}, 16384},          // CUDA-core kernel (d 80)
      {{32, 8, 128, 16, {1, 700, 2049}, 100}, 32768},        // sliding window
      // Streaming kernel shapes: 4 kv heads, and 19 rows planned for 32K.
      {{32, 4, 128, 16, {1, 100, 3000, 6000}}, 32768},
      {{32, 8, 128, 16, {1, 5, 16, 17, 64, 65, 100, 1000, 1024, 2000, 3000, 4096, 17, 300, 1,
                         2, 33, 700, 129}},
       32768},
  };
  Coverage cov;
  for (const PlanCase& pc : cases) {
    const DecodeCase& c = pc.c;
    SCOPED_TRACE(c.Name() + fmt::format(" planned for {}", pc.plan_len));
    std::vector<std::pair<int, int>> seqs;
    for (int kl : c.kv_lens) seqs.push_back({1, kl});
    const PagedBatch pb(seqs, c.page_size);
    // The host plan: same rows, kv_len = plan_len, pages that validate (any in range).
    const size_t ns = c.kv_lens.size();
    std::vector<int32_t> plan_kv(ns, pc.plan_len), plan_ps(ns), plan_pt;
    for (size_t s = 0; s < ns; ++s) {
      plan_ps[s] = int32_t(plan_pt.size());
      for (int i = 0; i < (pc.plan_len + c.page_size - 1) / c.page_size; ++i)
        plan_pt.push_back(int32_t(i % pb.num_pages));
    }
    AttentionBatch plan{int(ns), c.page_size, pb.q_start, pb.q_len, plan_kv, plan_ps, plan_pt};
    cuda::DeviceBatchPlan dev;
    dev.Upload(pb.batch, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    plan.device = &dev.view();
    const DecodeInputs in(c, pb, 0.5f, 2.0f);
    (void)CheckDecodeCase(c, DType::kF32, cov, in.q, in.kc, in.vc, pb, 1, 1, &plan);
    (void)CheckDecodeCase(c, DType::kF8E4M3, cov, in.q, in.kc, in.vc, pb, 0.5f / 64, 2.0f / 64, &plan);
  }
  EXPECT_GT(cov.Runs("cuda"), 0) << "the CUDA backend ran none of the cases";
}
#endif  // PEREGRINE_HAVE_CUDA

// A mixed batch (decode rows beside prefill rows): each kernel does only its own rows.
TEST(DecodeAttention, MixedBatchRoutesRows) {
  PG_SEED_TRACE();
  Coverage cov;
  const DecodeCase c{16, 4, 128, 16, {}};
  const PagedBatch pb({{1, 500}, {40, 90}, {1, 1}, {3, 17}, {1, 64}}, c.page_size);
  const DecodeInputs in(c, pb, 1.0f, 1.0f);
  (void)CheckDecodeCase(c, DType::kF32, cov, in.q, in.kc, in.vc, pb, 1, 1);
  cov.Check<AttentionParams>();
}

// fp8 caches under prefill rows: the prefill kernel's head dims and (d 32 / 80) the general
// row kernel, beside decode rows; every backend that takes fp8 against ref on the same bytes.
TEST(DecodeAttention, Fp8CacheWithPrefillRows) {
  PG_SEED_TRACE();
  Coverage cov;
  for (const DecodeCase& c : {DecodeCase{8, 2, 128, 16, {}}, DecodeCase{4, 2, 32, 16, {}},
                              DecodeCase{10, 2, 80, 8, {}}}) {
    SCOPED_TRACE(fmt::format("{}:{} d={} page={} (prefill rows)", c.heads, c.kv_heads,
                             c.head_dim, c.page_size));
    CheckDecodeBatchBothCaches(c, PagedBatch({{1, 300}, {37, 90}, {1, 1}, {7, 7}}, c.page_size),
                               cov, kFp8VsF32FewKeys);
  }
  cov.Check<AttentionParams>();
}

// KvWrite into fp8 caches: a power-of-two scale divides exactly, so every backend's bytes
// equal ref's; values past 448 * scale saturate.
TEST(KvWriteFp8, BytesMatchReferenceAndSaturate) {
  PG_SEED_TRACE();
  const int kvh = 3, d = 64, page = 8;
  const PagedBatch pb({{5, 12}, {1, 1}, {9, 9}}, page);
  Tensor k(DType::kF32, {pb.tokens, kvh, d}), v(DType::kF32, {pb.tokens, kvh, d});
  FillNormal(k, 0.0f, 40.0f);  // scale 0.25: |k| > 112 saturates (a few percent of values)
  FillNormal(v);
  for (const Tensor* t : {&k, &v}) RoundToBf16(*t);
  k.data<float>()[0] = 1e6f;
  k.data<float>()[1] = -1e6f;
  auto fresh = [&] {
    Tensor c(DType::kF8E4M3, {pb.num_pages, page, kvh, d});
    std::fill(c.data<uint8_t>(), c.data<uint8_t>() + c.numel(), uint8_t(0x11));
    return c;
  };
  Tensor rk = fresh(), rv = fresh();
  KvWriteParams p{k.view(), v.view(), {rk.view(), rv.view(), 0.25f, 0.5f}, &pb.batch};
  RunWith(RefImpl<KvWriteParams>(), p);
  const int64_t slot0 = ((pb.page_table[0] * page + 7) * kvh) * d;  // seq 0, position 7, head 0
  EXPECT_EQ(rk.data<uint8_t>()[slot0], 0x7e) << "+448 (saturated)";
  EXPECT_EQ(rk.data<uint8_t>()[slot0 + 1], 0xfe) << "-448 (saturated)";
  EXPECT_EQ(F8E4M3ToF32(rv.data<uint8_t>()[slot0 + 5]), F8E4M3ToF32(F32ToF8E4M3(v.data<float>()[5] / 0.5f)));
  // Only device backends write fp8 caches (CPU kernels take f32 caches): every device
  // backend must run this case.
  for (const auto* kb : Backends<KvWriteParams>()) {
    Tensor bk = fresh(), bv = fresh();
    p.cache.k_cache = bk.view(), p.cache.v_cache = bv.view();
    if (!RunBackend(*kb, p)) {
      EXPECT_FALSE(OnDevice(*kb)) << kb->backend << " refused an fp8 cache";
      continue;
    }
    int64_t diff = 0;
    for (int64_t i = 0; i < bk.numel(); ++i)
      diff += (bk.data<uint8_t>()[i] != rk.data<uint8_t>()[i]) + (bv.data<uint8_t>()[i] != rv.data<uint8_t>()[i]);
    EXPECT_EQ(diff, 0) << kb->backend << ": fp8 bytes differ from ref";
  }
}


struct RopeCase {
  int heads, kv_heads, head_dim;
  RopeConfig config;
  DType cache;
  float k_scale, v_scale;
  bool qk_norm = false;  // Qwen3 per-head q/k RMSNorm before the rotation
};


TEST(RopeKvWrite, EveryBackendMatchesReference) {
  PG_SEED_TRACE();
  RopeConfig llama3{.theta = 500000.0f, .scaling = RopeScaling::kLlama3, .factor = 8.0f,
                    .low_freq_factor = 1.0f, .high_freq_factor = 4.0f,
                    .original_max_position = 8192};
  RopeConfig gptj{.theta = 10000.0f, .rotary_dim = 32, .neox = false};
  RopeConfig yarn{.theta = 10000.0f, .scaling = RopeScaling::kYarn, .factor = 4.0f,
                  .original_max_position = 4096};
  const std::vector<RopeCase> cases = {
      {32, 8, 128, llama3, DType::kF32, 1, 1},
      {32, 8, 128, llama3, DType::kF8E4M3, 0.125f, 0.0625f},
      {9, 3, 64, gptj, DType::kF32, 1, 1},
      {8, 2, 64, yarn, DType::kF8E4M3, 0.03f, 0.05f},
      {32, 8, 128, llama3, DType::kF32, 1, 1, true},        // Qwen3-style q/k norm
      {16, 4, 128, llama3, DType::kF8E4M3, 0.125f, 0.0625f, true},
  };
  Coverage cov;
  for (const RopeCase& c : cases) {
    SCOPED_TRACE(fmt::format("{}:{} d={} cache {} qk_norm {}", c.heads, c.kv_heads, c.head_dim,
                             Info(c.cache).name, c.qk_norm));
    const int page = 16;
    const PagedBatch pb({{1, 300}, {7, 7}, {1, 1}, {20, 57}}, page);
    Tensor q(DType::kF32, {pb.tokens, c.heads, c.head_dim});
    Tensor k(DType::kF32, {pb.tokens, c.kv_heads, c.head_dim});
    Tensor v(DType::kF32, {pb.tokens, c.kv_heads, c.head_dim});
    Tensor pos(DType::kI32, {pb.tokens});
    for (size_t s = 0; s < pb.q_len.size(); ++s)
      for (int i = 0; i < pb.q_len[s]; ++i)
        pos.data<int32_t>()[pb.q_start[s] + i] = pb.kv_len[s] - pb.q_len[s] + i;
    FillNormal(q), FillNormal(k), FillNormal(v);
    for (const Tensor* t : {&q, &k, &v}) RoundToBf16(*t);
    const std::vector<float> q0 = Copy(q), k0 = Copy(k);
    auto cache = [&] {
      Tensor t(c.cache, {pb.num_pages, page, c.kv_heads, c.head_dim});
      std::memset(t.data<uint8_t>(), 0, size_t(t.nbytes()));
      return t;
    };
    Tensor rk = cache(), rv = cache();
    RopeKvWriteParams p{q.view(), k.view(), v.view(), pos.view(), c.config,
                        {rk.view(), rv.view(), c.k_scale, c.v_scale}, &pb.batch};
    const Tensor qn = NormWeight(c.head_dim), kn = NormWeight(c.head_dim);
    if (c.qk_norm) p.q_norm = qn.view(), p.k_norm = kn.view(), p.norm_eps = 1e-6f;
    RunWith(RefImpl<RopeKvWriteParams>(), p);
    const std::vector<float> rq = Copy(q), rkrot = Copy(k);
    if (c.qk_norm) {
      // Oracle for ref: the fused op equals RmsNorm over each head, then the unnormed op.
      Restore(q, q0), Restore(k, k0);
      for (auto [t, w, h] : {std::tuple{&q, &qn, c.heads}, std::tuple{&k, &kn, c.kv_heads}}) {
        TensorView rows = TensorView::Contiguous(t->data<float>(), DType::kF32,
                                                 {pb.tokens * h, c.head_dim});
        RunWith(RefImpl<RmsNormParams>(), RmsNormParams{.x = rows, .weight = w->view(),
                                                        .out = rows, .eps = 1e-6f});
      }
      Tensor ck = cache(), cv = cache();
      RunWith(RefImpl<RopeKvWriteParams>(),
              RopeKvWriteParams{q.view(), k.view(), v.view(), pos.view(), c.config,
                                {ck.view(), cv.view(), c.k_scale, c.v_scale}, &pb.batch});
      ExpectExact(Copy(q).data(), rq.data(), q.numel(), "ref fused q vs RmsNorm + Rope");
      ExpectExact(Copy(k).data(), rkrot.data(), k.numel(), "ref fused k vs RmsNorm + Rope");
      ASSERT_EQ(std::memcmp(ck.data<uint8_t>(), rk.data<uint8_t>(), size_t(rk.nbytes())), 0);
    }
    // Oracle for ref (no q/k norm): position 0 rows are unrotated; rotation keeps every
    // head's norm.
    for (int64_t h = 0; h < c.kv_heads * c.head_dim && !c.qk_norm; ++h)  // seq 1 row 0: position 0
      ASSERT_EQ(rkrot[size_t(pb.q_start[1] * c.kv_heads * c.head_dim + h)],
                k0[size_t(pb.q_start[1] * c.kv_heads * c.head_dim + h)]);
    for (int64_t row = 0; row < pb.tokens * c.heads && !c.qk_norm; ++row) {
      double n0 = 0, n1 = 0;
      for (int e = 0; e < c.head_dim; ++e)
        n0 += double(q0[size_t(row * c.head_dim + e)]) * q0[size_t(row * c.head_dim + e)],
            n1 += double(rq[size_t(row * c.head_dim + e)]) * rq[size_t(row * c.head_dim + e)];
      ASSERT_NEAR(n1, n0, 1e-4 * n0 + 1e-6) << "row " << row;
    }
    for (const auto* kb : Backends<RopeKvWriteParams>()) {
      Restore(q, q0), Restore(k, k0);
      Tensor bk = cache(), bv = cache();
      p.cache.k_cache = bk.view(), p.cache.v_cache = bv.view();
      if (!RunBackend(*kb, p)) continue;
      cov.Ran(kb->backend);
      const Tolerance tol = OnDevice(*kb) ? kBf16 : Tolerance{1e-6, 1e-12};
      ExpectClose(rq.data(), q.data<float>(), q.numel(), tol, kb->backend + " q");
      ExpectClose(rkrot.data(), k.data<float>(), k.numel(), tol, kb->backend + " k");
      // The caches, decoded: bf16 rounding of the rotated k (device) may move an fp8 value
      // by one e4m3 step, so compare decoded values at e4m3 tolerance there.
      auto decoded = [&](const Tensor& t, float scale) {
        std::vector<float> out(size_t(t.numel()));
        for (int64_t i = 0; i < t.numel(); ++i)
          out[size_t(i)] = c.cache == DType::kF8E4M3 ? F8E4M3ToF32(t.data<uint8_t>()[i]) * scale
                                                     : t.data<float>()[i];
        return out;
      };
      // Device: the rotated k is rounded to bf16 (2^-8 relative) before it is stored; fp8
      // then differs from ref by at most one e4m3 step (2^-3 relative; 2^-9 * scale in the
      // subnormals). v is not rotated: exact but for the bf16 step of an f32 cache.
      const bool f8 = c.cache == DType::kF8E4M3;
      const double rel = !OnDevice(*kb) ? 1e-6 : (f8 ? 1.0 / 8 + 1.0 / 256 : 1.0 / 128);
      // q/k norm on a device: the normalised heads (|x| <~ 6) are rounded to bf16 before the
      // rotation, which can cancel: an absolute 12 * 2^-9 (about 1/32) on top.
      const double norm_abs = OnDevice(*kb) && c.qk_norm ? 1.0 / 32 : 0.0;
      ExpectNearEach(decoded(rk, c.k_scale), decoded(bk, c.k_scale), rel,
                     (f8 ? std::ldexp(c.k_scale, -9) : 0.0) + norm_abs, kb->backend + " k cache");
      // v: the device multiplies by 1 / scale where ref divides (one e4m3 step at a tie).
      ExpectNearEach(decoded(rv, c.v_scale), decoded(bv, c.v_scale),
                     !OnDevice(*kb) ? 1e-6 : (f8 ? 1.0 / 8 : 1.0 / 256),
                     f8 ? std::ldexp(c.v_scale, -9) : 0.0, kb->backend + " v cache");
    }
  }
  cov.Check<RopeKvWriteParams>();
}

}  // namespace
}  // namespace pg::ops::testing
