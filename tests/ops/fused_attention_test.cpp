// RopeKvWriteAttention (ops_fused_attention.h): every backend (the fused CUDA kernel, the CUDA
// and CPU compositions) against ref = RopeKvWrite then Attention of the reference kernels, on
// decode batches: kv_len 1 and page edges, GQA 32/8 and 32/4 (and 8/8, 9/3), head dims 128
// and 64, contexts up to 32K, bf16 and fp8 caches, q/k norm on and off, batches of 1-8 rows
// with different lengths (and 9: the fused kernel declines, the composition runs), sliding
// window + softcap, and a split plan made for longer contexts than the batch holds (a decode
// graph captured at 32K). Checked: the attention output and both caches (new slots written,
// every other slot untouched).
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "op_test_util.h"
#include "paged_test_util.h"

#if defined(PEREGRINE_HAVE_CUDA)
#include <cuda_runtime.h>

#include "kernels/cuda/attention/decode_fused.h"
#include "kernels/cuda/batch_plan.h"
#endif

namespace pg::ops::testing {
namespace {

constexpr Tolerance kF32Attention{1e-4, 1e-9};
// fp8 caches on a device: the device rounds the normalised / rotated new k to bf16 before its
// e4m3 conversion (as RopeKvWrite does), which can move a stored value by one e4m3 step (2u =
// 1/8 relative) against ref; a short row's output moves by up to that share. Seen: max 0.112
// of rms at 5 keys with q/k norm, equal for the fused kernel and the CUDA composition (GPU
// request 5, seed 1986029478). nmse stays kBf16Attention's.
constexpr Tolerance kFp8DeviceAttention{0.25, kBf16Attention.nmse};

struct FusedCase {
  int heads, kv_heads, head_dim, page_size;
  std::vector<int> kv_lens;  // one new token per sequence, at position kv_len - 1
  DType cache = DType::kF32;  // kF32 (bf16 on a device) or kF8E4M3
  bool qk_norm = false;
  int window = 0;
  float softcap = 0.0f;
  int plan_len = 0;  // > 0: device backends get a host plan of this kv_len per sequence
  RopeConfig rope{.theta = 500000.0f, .scaling = RopeScaling::kLlama3, .factor = 8.0f,
                  .low_freq_factor = 1.0f, .high_freq_factor = 4.0f,
                  .original_max_position = 8192};
  std::string Name() const {
    return fmt::format("{}:{} d={} page={} lens[0]={} seqs={} cache {} qk_norm {} window {} "
                       "softcap {} plan {}",
                       heads, kv_heads, head_dim, page_size, kv_lens[0], kv_lens.size(),
                       Info(cache).name, qk_norm, window, softcap, plan_len);
  }
};

std::vector<FusedCase> Cases() {
  const RopeConfig gptj{.theta = 10000.0f, .rotary_dim = 32, .neox = false};
  const DType f8 = DType::kF8E4M3;
  return {
      {32, 8, 128, 16, {1}},                                   // no history
      {32, 8, 128, 16, {1000, 17, 16, 33}},                    // page edges
      {32, 8, 128, 16, {1000, 17, 16, 33}, f8},
      {32, 8, 128, 16, {32768}},                               // 32K, many splits
      {32, 8, 128, 16, {8000}, f8},
      {32, 4, 128, 16, {5, 300, 4097, 1, 2048, 64, 65, 8000}, DType::kF32, true},  // Qwen3-30B
      {32, 4, 128, 16, {5, 300, 4097, 1, 2048, 64, 65, 8000}, f8, true},
      {32, 4, 64, 16, {129, 1500}, f8, true},                  // d 64
      {32, 8, 64, 8, {7, 8, 9, 777}},                          // d 64, page 8
      {8, 8, 128, 16, {100, 2}},                               // MHA
      {9, 3, 64, 16, {31, 32, 300}, DType::kF32, false, 0, 0.0f, 0, gptj},  // partial rotary
      {16, 4, 128, 16, {700, 40}, DType::kF32, false, 100, 30.0f},          // window, softcap
      {32, 8, 128, 16, {9, 1, 40, 300, 17, 1000, 2, 64, 65}},  // 9 rows: composition only
      {32, 8, 128, 16, {1024, 5, 3000}, DType::kF32, false, 0, 0.0f, 32768},  // 32K graph plan
      {32, 4, 128, 16, {1024, 1, 100, 5000}, f8, true, 0, 0.0f, 16384},
      {32, 2, 128, 16, {333, 70, 1}},                          // group 16 (the largest)
      {32, 4, 128, 16, {1024, 2047, 65}, DType::kF32, true},   // group 8: the cluster plan (run 7)
      {32, 8, 128, 16, {1000}},                                // group 4: the two-tile plan (run 7)
      {32, 4, 128, 16, {1024}, DType::kF32, true},             // Qwen3-30B-A3B 1 x 1K: one cluster a kv head
      // Qwen3-30B-A3B 1 x 2K, and 1 x 1.5K in the engine's 2048-key graph set: the cluster
      // plan's 2K grid (PG_FUSED_CLUSTER_FIT 1 / 2: one cluster a kv head, two stages at 2)
      {32, 4, 128, 16, {2048}, DType::kF32, true, 0, 0.0f, 2048},
      {32, 4, 128, 16, {1500}, DType::kF32, true, 0, 0.0f, 2048},
      // One sequence past 8K: the cluster plan's counter form (24 splits of 384 keys merged
      // through the counter), also at 13K in the engine's 14336-key graph set (32 splits of
      // 448 keys); past 14K: the streaming kernel.
      {32, 4, 128, 16, {9000}, DType::kF32, true},
      {32, 4, 128, 16, {13000}, DType::kF32, true, 0, 0.0f, 14336},
      {32, 4, 128, 16, {15000}, DType::kF32, true},
      // 1 x 3.5K and 1 x 6K in the engine's 4096- and 8192-key graph sets: the cluster plan past
      // 2K (16 splits of up to 256 / 512 keys, the loop form at two ring stages a warp)
      {32, 4, 128, 16, {3500}, DType::kF32, true, 0, 0.0f, 4096},
      {32, 4, 128, 16, {6000}, DType::kF32, true, 0, 0.0f, 8192},
  };
}

// Cache values as stored, decoded (fp8: times the scale).
std::vector<float> Decoded(const Tensor& t, float scale) {
  std::vector<float> out(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    out[size_t(i)] = t.dtype() == DType::kF8E4M3 ? F8E4M3ToF32(t.data<uint8_t>()[i]) * scale
                                               : t.data<float>()[i];
  return out;
}

std::vector<std::pair<int, int>> SeqsOf(const FusedCase& c) {
  std::vector<std::pair<int, int>> seqs;
  for (int kl : c.kv_lens) seqs.push_back({1, kl});
  return seqs;
}

// One case's inputs: the batch, the new rows (bf16 values), the history (every slot random,
// the new slots too: the op must overwrite them; kept in the cache type, fp8 quantised, and
// copied fresh for every run), the q / k norm weights. Not movable: the params point into it.
struct FusedInputs {
  const FusedCase& c;
  const PagedBatch pb;
  const bool f8;
  const float k_scale, v_scale;
  Tensor q, k, v, pos, kc0, vc0;
  const Tensor qn, kn;
  std::vector<float> q0, k0;

  explicit FusedInputs(const FusedCase& fc)
      : c(fc), pb(SeqsOf(fc), fc.page_size), f8(fc.cache == DType::kF8E4M3),
        k_scale(f8 ? 0.5f / 64 : 1.0f), v_scale(f8 ? 2.0f / 64 : 1.0f),
        q(DType::kF32, {pb.tokens, fc.heads, fc.head_dim}),
        k(DType::kF32, {pb.tokens, fc.kv_heads, fc.head_dim}),
        v(DType::kF32, {pb.tokens, fc.kv_heads, fc.head_dim}), pos(DType::kI32, {pb.tokens}),
        qn(NormWeight(fc.head_dim)), kn(NormWeight(fc.head_dim)) {
    for (size_t s = 0; s < pb.kv_len.size(); ++s)
      pos.data<int32_t>()[pb.q_start[s]] = pb.kv_len[s] - 1;
    FillNormal(q), FillNormal(k, 0.0f, 0.5f), FillNormal(v, 0.0f, 2.0f);
    for (const Tensor* t : {&q, &k, &v}) RoundToBf16(*t);
    Tensor kc32 = CacheTensor(DType::kF32), vc32 = CacheTensor(DType::kF32);
    FillNormal(kc32, 0.0f, 0.5f), FillNormal(vc32, 0.0f, 2.0f);
    RoundToBf16(kc32), RoundToBf16(vc32);
    kc0 = Typed(kc32, k_scale), vc0 = Typed(vc32, v_scale);
    q0 = Copy(q), k0 = Copy(k);
  }
  FusedInputs(const FusedInputs&) = delete;
  FusedInputs& operator=(const FusedInputs&) = delete;

  Tensor CacheTensor(DType t) const {
    return Tensor(t, {pb.num_pages, c.page_size, c.kv_heads, c.head_dim});
  }
  Tensor Typed(const Tensor& src, float scale) const {
    Tensor t = CacheTensor(c.cache);
    if (f8) Quantize(src, t, scale);
    else std::memcpy(t.data<float>(), src.data<float>(), size_t(src.nbytes()));
    return t;
  }
  Tensor Fresh(const Tensor& from) const {
    Tensor t = CacheTensor(c.cache);
    std::memcpy(t.data<uint8_t>(), from.data<uint8_t>(), size_t(from.nbytes()));
    return t;
  }
  // The op's params over caches kc / vc and out, with q and k as drawn (the composition
  // rotates them in place, so every run restores them first).
  RopeKvWriteAttentionParams Params(Tensor& kc, Tensor& vc, Tensor& out) {
    Restore(q, q0), Restore(k, k0);
    RopeKvWriteAttentionParams p{
        .rope = {q.view(), k.view(), v.view(), pos.view(), c.rope,
                 {kc.view(), vc.view(), k_scale, v_scale}, &pb.batch},
        .out = out.view(), .sliding_window = c.window, .logit_softcap = c.softcap};
    if (c.qk_norm) p.rope.q_norm = qn.view(), p.rope.k_norm = kn.view(), p.rope.norm_eps = 1e-6f;
    return p;
  }
};

// The CUDA backend runs each case this many times (runs 0-12 below); the count check at the end
// uses it, so a new run cannot leave that check behind (it did once: 12 after run 12 came).
constexpr int kCudaRuns = 13;

TEST(RopeKvWriteAttention, EveryBackendMatchesComposition) {
  PG_SEED_TRACE();
  // The CUDA backend's performance policy fuses fp8 caches only up to PG_FUSED_MAX_FP8_KEYS
  // planned keys (read at every call): the harness checks the kernel at every length.
  setenv("PG_FUSED_MAX_FP8_KEYS", "1000000000", /*overwrite=*/0);
  Coverage cov;
  int fused_runs = 0;
  [[maybe_unused]] int64_t small_runs = 0;  // CUDA runs that took the small-shared-memory variant
  [[maybe_unused]] int64_t cluster_runs = 0;  // of those, launches that merged in a cluster
  [[maybe_unused]] int64_t two_tile_runs = 0;  // launches of the two-tile plan (run 7)
  // Launches of the exchange form (runs 8-10): by its merge (cluster / counter) and plan.
  [[maybe_unused]] int64_t xw_cluster = 0, xw_counter = 0, xw_two_tile = 0, xw_push = 0, xw_async_runs = 0;
  [[maybe_unused]] int64_t xw_default = 0;  // run 12: the exchange form by its default (cluster plan)
#if defined(PEREGRINE_HAVE_CUDA)
  const int64_t stream_fused0 = cuda::DecodeStreamFusedLaunches();  // long plans' route
  const int64_t loop2_0 = cuda::DecodeFusedClusterLoop2Launches();
  const int64_t counter0 = cuda::DecodeFusedClusterCounterLaunches();
#endif
  for (const FusedCase& c : Cases()) {
    SCOPED_TRACE(c.Name());
    const auto t0 = std::chrono::steady_clock::now();
    FusedInputs in(c);
    const PagedBatch& pb = in.pb;
    const bool f8 = in.f8;
    const float k_scale = in.k_scale, v_scale = in.v_scale;
    Tensor rk = in.Fresh(in.kc0), rv = in.Fresh(in.vc0);
    Tensor ref(DType::kF32, {pb.tokens, c.heads, c.head_dim});
    const RopeKvWriteAttentionParams p = in.Params(rk, rv, ref);
    RunWith(RefImpl<RopeKvWriteAttentionParams>(), p);
    const std::vector<float> ref_k = Decoded(rk, k_scale), ref_v = Decoded(rv, v_scale);

#if defined(PEREGRINE_HAVE_CUDA)
    // A host plan for longer contexts (the device plan holds the real lengths).
    const size_t ns = c.kv_lens.size();
    std::vector<int32_t> plan_kv(ns, c.plan_len), plan_ps(ns), plan_pt;
    for (size_t s = 0; s < ns && c.plan_len > 0; ++s) {
      plan_ps[s] = int32_t(plan_pt.size());
      for (int i = 0; i < (c.plan_len + c.page_size - 1) / c.page_size; ++i)
        plan_pt.push_back(int32_t(i % pb.num_pages));
    }
    AttentionBatch plan{int(ns), c.page_size, pb.q_start, pb.q_len, plan_kv, plan_ps, plan_pt};
    cuda::DeviceBatchPlan dev;
    if (c.plan_len > 0) {
      dev.Upload(pb.batch, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      plan.device = &dev.view();
    }
#endif
    for (const auto* kb : Backends<RopeKvWriteAttentionParams>()) {
      if (c.plan_len > 0 && !OnDevice(*kb)) continue;
      // Twice: the fused kernel's split counters must be back at zero after a launch; on
      // CUDA twice more with the small-shared-memory variant forced on (run 2: 3 tile warps,
      // run 3: 4; one ring stage a warp, so a warp with more than one tile takes them in
      // turns), then the 3-stage kernel with its register latency paths forced on (run 4) and
      // off (run 5): the default picks them by the rows (q / k norm); run 6 the small variant
      // (3 tile warps) with its splits merged in a thread-block cluster where they fit one;
      // run 7 every choice by its rule (the process defaults: the cluster plan or the two-tile
      // plan where they apply, decode_fused_plan.cu ClusterPlan / TwoTilePlan). Runs 8-10 take
      // the exchange form (decode_xw.cuh) wherever a split's tiles fit the rings: 8 by the
      // rules (the cluster and two-tile plans) with the partials pushed from registers
      // (PG_FUSED_XW=2), 9 the small variant with 4 tile warps and the cluster merge forced,
      // 10 with 3 tile warps and the counter merge, 11 by the rules with the asynchronous push
      // (PG_FUSED_XW=3).
      // Run 12: every choice by its rules, the exchange form's included (its default: the
      // asynchronous form on the cluster plan only).
      for (int rep = 0; rep < (kb->backend == "cuda" ? kCudaRuns : 1); ++rep) {
#if defined(PEREGRINE_HAVE_CUDA)
        const int64_t small0 = cuda::DecodeFusedSmallLaunches(), mma0 = cuda::DecodeFusedLaunches();
        const int64_t cluster0 = cuda::DecodeFusedClusterLaunches();
        const int64_t two_tile0 = cuda::DecodeFusedTwoTileLaunches();
        const int64_t xw0 = cuda::DecodeFusedXwLaunches(), xw_async0 = cuda::DecodeFusedXwAsyncLaunches();
        const bool small_run = kb->backend == "cuda" && (rep == 2 || rep == 3 || rep == 6 || rep == 9 || rep == 10);
        const bool rules = rep == 7 || rep == 8 || rep == 11 || rep == 12;
        const int small_mode = rep == 6 || rep == 10 ? 3 : rep == 9 ? 4 : rep + 1;
        const int mode0 = cuda::SetDecodeFusedSmallMode(rules ? -1 : small_run ? small_mode : 0);
        const int cluster0_mode = cuda::SetDecodeFusedClusterMode(rules ? -1 : rep == 6 || rep == 9 ? 1 : 0);
        const int prep0 = cuda::SetDecodeFusedPrepMode(rep == 4 ? 1 : rep == 5 ? 0 : -1);
        const int xw_mode0 = cuda::SetDecodeFusedXwMode(rep == 12 ? -1 : rep == 8 ? 2 : rep == 11 ? 3 : rep > 8 ? 1 : 0);
#endif
        Tensor bk = in.Fresh(in.kc0), bv = in.Fresh(in.vc0);
        Tensor out(DType::kF32, {pb.tokens, c.heads, c.head_dim});
        RopeKvWriteAttentionParams bp = in.Params(bk, bv, out);
#if defined(PEREGRINE_HAVE_CUDA)
        if (c.plan_len > 0) bp.rope.batch = &plan;
#endif
        const bool ran = RunBackend(*kb, bp);
#if defined(PEREGRINE_HAVE_CUDA)
        cuda::SetDecodeFusedSmallMode(mode0);
        cuda::SetDecodeFusedPrepMode(prep0);
        cuda::SetDecodeFusedClusterMode(cluster0_mode);
        cuda::SetDecodeFusedXwMode(xw_mode0);
        if (ran && kb->backend == "cuda") {
          const int64_t clusters = cuda::DecodeFusedClusterLaunches() - cluster0;
          const int64_t two_tiles = cuda::DecodeFusedTwoTileLaunches() - two_tile0;
          const int64_t xw = cuda::DecodeFusedXwLaunches() - xw0;
          if (rep < 8) {
            EXPECT_EQ(xw, 0) << "run " << rep << ": the exchange form was set off";
          }
          xw_cluster += clusters > 0 && rep == 9 ? xw : 0;
          xw_push += clusters > 0 && rep == 8 ? xw : 0;
          const int64_t xw_async = cuda::DecodeFusedXwAsyncLaunches() - xw_async0;
          if (rep != 11 && rep != 12) {
            EXPECT_EQ(xw_async, 0) << "run " << rep << ": the asynchronous push was not asked for";
          }
          if (rep == 12) {  // by default: asynchronous, on the cluster plan, nowhere else
            EXPECT_EQ(xw_async, xw) << "run 12: the default exchange form is the asynchronous one";
            if (xw > 0) {
              EXPECT_GT(clusters, 0) << "run 12: the exchange form off the cluster plan";
            }
            if (two_tiles > 0) {
              EXPECT_EQ(xw, 0) << "run 12: the exchange form on the two-tile plan";
            }
            xw_default += xw;
          }
          xw_async_runs += rep == 11 ? xw_async : 0;
          xw_counter += clusters == 0 ? xw : 0;
          xw_two_tile += two_tiles > 0 ? xw : 0;
          cluster_runs += clusters;
          two_tile_runs += two_tiles;
          // Forced on (runs 2, 3, 6), the small variant runs wherever the fused tensor-core
          // kernel does; long plans go to the streaming kernel instead (no fused launch).
          const int64_t small = cuda::DecodeFusedSmallLaunches() - small0;
          if (!rules) {
            EXPECT_EQ(small, small_run ? cuda::DecodeFusedLaunches() - mma0 : 0) << "run " << rep;
          }
          small_runs += small;
        }
#endif
        if (!ran) continue;
        cov.Ran(kb->backend);
        fused_runs += kb->backend == "cuda";
        const std::string what = fmt::format("{} (run {})", kb->backend, rep);
        ExpectClose(ref.data<float>(), out.data<float>(), out.numel(),
                    !OnDevice(*kb) ? kF32Attention : (f8 ? kFp8DeviceAttention : kBf16Attention),
                    what + " out");
        // Caches as in RopeKvWrite.EveryBackendMatchesReference: a device rounds the rotated
        // k to bf16 before storing it (fp8: one e4m3 step), q/k norm adds an absolute 1/32.
        const bool dev_run = OnDevice(*kb);
        const double norm_abs = dev_run && c.qk_norm ? 1.0 / 32 : 0.0;
        ExpectNearEach(ref_k, Decoded(bk, k_scale),
                       !dev_run ? 1e-6 : (f8 ? 1.0 / 8 + 1.0 / 256 : 1.0 / 128),
                       (f8 ? std::ldexp(k_scale, -9) : 0.0) + norm_abs, what + " k cache");
        ExpectNearEach(ref_v, Decoded(bv, v_scale), !dev_run ? 1e-6 : (f8 ? 1.0 / 8 : 1.0 / 256),
                       f8 ? std::ldexp(v_scale, -9) : 0.0, what + " v cache");
      }
    }
    fmt::print("case {}: {:.0f} ms\n", c.Name(),
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  cov.Check<RopeKvWriteAttentionParams>();
#if defined(PEREGRINE_HAVE_CUDA)
  // Every case fits the fused kernel (kCudaRuns runs each) but the 9-row one and the softcapped
  // one (the fused kernels take no softcap: cuda_register.cpp FusedAttentionSupported).
  if (Registry::Global().table<RopeKvWriteAttentionParams>().Find("cuda") != nullptr) {
    int fused_cases = 0;
    for (const FusedCase& c : Cases()) fused_cases += c.kv_lens.size() <= 8 && c.softcap == 0.0f;
    EXPECT_EQ(fused_cases, int(Cases().size()) - 2);
    EXPECT_EQ(fused_runs, kCudaRuns * fused_cases) << "the fused kernel declined a case";
    EXPECT_GT(two_tile_runs, 0) << "no case reached the two-tile plan";
    EXPECT_GT(small_runs, 0) << "no case reached the small-shared-memory variant";
    EXPECT_GT(cluster_runs, 0) << "no case reached the cluster merge";
    EXPECT_GT(xw_cluster, 0) << "no case reached the exchange form with the cluster merge";
    EXPECT_GT(xw_push, 0) << "no case reached the exchange form's push into the cluster merge";
    EXPECT_GT(xw_async_runs, 0) << "no case reached the exchange form's asynchronous push";
    EXPECT_GT(xw_counter, 0) << "no case reached the exchange form with the counter merge";
    EXPECT_GT(xw_two_tile, 0) << "no case reached the exchange form of the two-tile plan";
    EXPECT_GT(xw_default, 0) << "no case took the exchange form by default (the cluster plan)";
    EXPECT_GT(cuda::DecodeStreamFusedLaunches() - stream_fused0, 0)
        << "no case reached the streaming kernel with the new token inside";
    EXPECT_GT(cuda::DecodeFusedClusterLoop2Launches() - loop2_0, 0)
        << "no case reached the cluster plan's two-stage loop form";
    EXPECT_GT(cuda::DecodeFusedClusterCounterLaunches() - counter0, 0)
        << "no case reached the cluster plan's counter form (one sequence past 8K keys)";
  }
#endif
}

// The L2 hint (RopeKvWriteAttentionParams::l2_after) is checked like any input
// (ExpectL2HintChecked).
TEST(RopeKvWriteAttention, ChecksItsL2Hint) {
  const FusedCase c{8, 8, 64, 16, {33}};
  FusedInputs in(c);
  Tensor kc = in.Fresh(in.kc0), vc = in.Fresh(in.vc0);
  Tensor out(DType::kF32, {in.pb.tokens, c.heads, c.head_dim});
  ExpectL2HintChecked(in.Params(kc, vc, out), &RopeKvWriteAttentionParams::l2_after,
                      [](const RopeKvWriteAttentionParams& p) { RopeKvWriteAttention(p); });
}

#if defined(PEREGRINE_HAVE_CUDA)
// The streaming kernel's L2 hint (RopeKvWriteAttentionParams::l2_after, taken at a share of the
// bytes set by cuda::SetDecodeStreamL2AfterPct) changes no bit of the output or the caches:
// long contexts (the streaming route) of one row and of two (the second row's blocks ask for
// nothing), shares 0 (the hint dropped), 100 % and an uneven 37 % of a matrix whose bytes do
// not divide into the slices; the run without the hint within the device bound of ref.
TEST(RopeKvWriteAttention, CudaL2AfterHintChangesNoBit) {
  PG_SEED_TRACE();
  const auto* cuda_impl = Registry::Global().table<RopeKvWriteAttentionParams>().Find("cuda");
  ASSERT_NE(cuda_impl, nullptr) << "no CUDA backend registered";
  const std::vector<FusedCase> cases = {
      {32, 8, 128, 16, {32768}},                            // Llama-3.1-8B at 32K
      {32, 4, 128, 16, {12000, 30000}, DType::kF32, true},  // Qwen3-30B-A3B, two rows
  };
  Tensor w(DType::kBF16, {4096, 4100});  // the hinted bytes (never read into a result)
  std::memset(w.data<uint8_t>(), 0, size_t(w.nbytes()));
  for (const FusedCase& c : cases) {
    SCOPED_TRACE(c.Name());
    FusedInputs in(c);
    Tensor rk = in.Fresh(in.kc0), rv = in.Fresh(in.vc0);
    Tensor ref(DType::kF32, {in.pb.tokens, c.heads, c.head_dim});
    RunWith(RefImpl<RopeKvWriteAttentionParams>(), in.Params(rk, rv, ref));
    std::vector<std::vector<float>> base;  // out, k cache, v cache of the share-0 run
    for (int pct : {0, 100, 37}) {
      const int pct0 = cuda::SetDecodeStreamL2AfterPct(pct);
      const int64_t hinted0 = cuda::DecodeStreamL2AfterLaunches();
      const int64_t stream0 = cuda::DecodeStreamFusedLaunches();
      Tensor bk = in.Fresh(in.kc0), bv = in.Fresh(in.vc0);
      Tensor out(DType::kF32, {in.pb.tokens, c.heads, c.head_dim});
      RopeKvWriteAttentionParams bp = in.Params(bk, bv, out);
      bp.l2_after = w.view();
      const bool ran = RunBackend(*cuda_impl, bp);
      cuda::SetDecodeStreamL2AfterPct(pct0);
      ASSERT_TRUE(ran) << "the CUDA backend declined";
      EXPECT_EQ(cuda::DecodeStreamFusedLaunches() - stream0, 1) << "not the streaming route";
      EXPECT_EQ(cuda::DecodeStreamL2AfterLaunches() - hinted0, pct > 0 ? 1 : 0) << "share " << pct;
      std::vector<std::vector<float>> got = {Copy(out), Decoded(bk, in.k_scale),
                                             Decoded(bv, in.v_scale)};
      if (base.empty()) {
        ExpectClose(ref.data<float>(), out.data<float>(), out.numel(), kBf16Attention, "cuda out");
        base = std::move(got);
        continue;
      }
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i].size(), base[i].size());
        EXPECT_EQ(std::memcmp(got[i].data(), base[i].data(), got[i].size() * sizeof(float)), 0)
            << "share " << pct << ": " << (i == 0 ? "out" : i == 1 ? "k cache" : "v cache")
            << " differs from the run without the hint";
      }
    }
  }
}
#endif

#if defined(PEREGRINE_HAVE_CUDA)
// The plan rules at their defaults (decode_fused_plan.cu ClusterFit, decode_attention.cu
// DecodeStreamPreferred), Qwen3-30B-A3B's shape (32 heads over 4 kv heads, d 128): the cluster
// plan's grid is one cluster a kv head (16 splits) at 1K, 2K, 4K, 6K and 8K keys (group 16:
// 64-key splits, 32 at 2K, as before), its counter form past 8192 keys (17-32 splits of >= 384
// keys), one sequence past 14336 keys takes the streaming kernel (group 4, Llama-3.1-8B's: past
// 4096), batches only from 16384 keys in all, fp8 caches from 32768. (The plan knobs in the
// environment change these rules.)
// The loop form's kernel keeps to the registers that let its block sit beside the o
// projection's ring GEMV block (decode_fused.h kFusedLoopFormMaxRegisters): two more took
// Qwen3-30B-A3B's step 430-600 µs longer at 4K-12K keys (session 44), which no value test sees.
TEST(RopeKvWriteAttention, CudaLoopFormFitsBesideTheORing) {
  if (Registry::Global().table<RopeKvWriteAttentionParams>().Find("cuda") == nullptr)
    GTEST_FAIL() << "no CUDA backend registered";
  const int regs = cuda::DecodeFusedLoopFormRegisters();
  ASSERT_GT(regs, 0) << "no kernel attributes";
  EXPECT_LE(regs, cuda::kFusedLoopFormMaxRegisters)
      << "the loop form's kernel grew to " << regs << " registers a thread";
}

TEST(RopeKvWriteAttention, CudaPlansByLength) {
  if (Registry::Global().table<RopeKvWriteAttentionParams>().Find("cuda") == nullptr)
    GTEST_FAIL() << "no CUDA backend registered";
  for (const char* knob : {"PG_FUSED_CLUSTER_FIT", "PG_DSTREAM_FUSED_MIN_KEYS", "PG_FUSED_CLUSTER_PLAN",
                           "PG_FUSED_CLUSTER_MAX_KEYS", "PG_FUSED_COUNTER_MAX_KEYS", "PG_FUSED_MIN_SPLIT_KEYS"})
    ASSERT_EQ(std::getenv(knob), nullptr) << knob << " is set: this test checks the defaults";
  cuda::AttentionArgs a{};
  a.heads = 32, a.kv_heads = 4, a.head_dim = 128, a.kv_type = cuda::KvType::kBF16;
  for (const int64_t len : {1024, 2048, 3000, 4096, 6144, 8192}) {
    a.min_split_keys = cuda::DecodeFusedMinSplitKeys(a.kv_heads, len);
    const int splits = cuda::DecodeFusedSplits(a, 1, len);
    EXPECT_LE(splits, 16) << "one cluster a kv head at " << len << " keys";
    if (len % 1024 == 0) {
      EXPECT_EQ(splits, 16) << len << " keys";
    }
    EXPECT_FALSE(cuda::DecodeStreamPreferred(a, 1, len)) << len << " keys: the fused cluster plan";
  }
  // Group 16 keeps the 64-key splits (the fit is measured for groups up to 8).
  cuda::AttentionArgs g16 = a;
  g16.kv_heads = 2;
  g16.min_split_keys = cuda::DecodeFusedMinSplitKeys(g16.kv_heads, 2048);
  EXPECT_EQ(cuda::DecodeFusedSplits(g16, 1, 2048), 32) << "group 16 at 2048 keys";
  for (const int64_t len : {8193, 9000, 10240, 12288, 14336}) {  // the counter form (132 SMs: 4 x 32 fit)
    a.min_split_keys = cuda::DecodeFusedMinSplitKeys(a.kv_heads, len);
    const int splits = cuda::DecodeFusedSplits(a, 1, len);
    EXPECT_GT(splits, 16) << len << " keys: more splits than a cluster takes";
    EXPECT_LE(splits, 32) << len << " keys";
    EXPECT_EQ(splits, std::min<int64_t>(32, len / 384)) << len << " keys: 384-key splits, at most 32";
    EXPECT_FALSE(cuda::DecodeStreamPreferred(a, 1, len)) << len << " keys: the counter form";
  }
  EXPECT_TRUE(cuda::DecodeStreamPreferred(a, 1, 14337));
  EXPECT_TRUE(cuda::DecodeStreamPreferred(a, 1, 16384));
  cuda::AttentionArgs g4 = a;  // Llama-3.1-8B's group: no cluster plan
  g4.heads = 32, g4.kv_heads = 8;
  EXPECT_FALSE(cuda::DecodeStreamPreferred(g4, 1, 4096));
  EXPECT_TRUE(cuda::DecodeStreamPreferred(g4, 1, 4097)) << "group 4: streaming past 4096 keys";
  EXPECT_FALSE(cuda::DecodeStreamPreferred(a, 2, 6000)) << "batches: from 16384 keys in all";
  EXPECT_TRUE(cuda::DecodeStreamPreferred(a, 2, 8192));
  a.kv_type = cuda::KvType::kF8E4M3;
  EXPECT_FALSE(cuda::DecodeStreamPreferred(a, 1, 16384)) << "fp8 caches: from 32768 keys";
}
#endif

}  // namespace
}  // namespace pg::ops::testing
