// Row-wise ops (Embedding, RmsNorm, Rope, SwiGlu, Add, KvWrite): every backend against ref/
// on awkward sizes and fresh random data.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/quant.h"
#include "op_test_util.h"
#include "paged_test_util.h"

namespace pg::ops::testing {
namespace {

// Tolerances relative to rms(ref): RmsNorm and Rope differ from ref only by float vs double
// rounding (a few ulp); SwiGlu adds the vectorised exp (relative error < 2e-7).
constexpr Tolerance kRowwise{2e-5, 1e-11};

TEST(EmbeddingOp, EveryBackendMatchesReferenceExactly) {
  PG_SEED_TRACE();
  Coverage cov;
  for (DType dt : {DType::kQ8_0, DType::kQ4_1, DType::kF32, DType::kF16, DType::kBF16})
    for (int64_t hidden : {96, 576}) {
      const int64_t vocab = 1001, tokens = 19;
      SCOPED_TRACE(fmt::format("{} hidden={}", Name(dt), hidden));
      Tensor src(DType::kF32, {vocab, hidden}), table(dt, {vocab, hidden});
      FillNormal(src);
      for (int64_t r = 0; r < vocab; ++r)
        quant::QuantizeRow(dt, src.data<float>() + r * hidden, table.view().row_ptr(r), hidden);
      Tensor ids(DType::kI32, {tokens});
      for (int64_t i = 0; i < tokens; ++i) ids.data<int32_t>()[i] = int32_t(RandInt(0, vocab - 1));
      Tensor ref_out(DType::kF32, {tokens, hidden});
      RunWith(RefImpl<EmbeddingParams>(), {table.view(), ids.view(), ref_out.view()});
      for (const auto* k : Backends<EmbeddingParams>()) {
        Tensor out(DType::kF32, {tokens, hidden});
        EmbeddingParams p{table.view(), ids.view(), out.view()};
        if (!RunBackend(*k, p)) continue;
        cov.Ran(k->backend);
        ExpectExactFor(*k, ref_out.data<float>(), out.data<float>(), out.numel(), k->backend);
        const int32_t id3 = ids.data<int32_t>()[3];
        ids.data<int32_t>()[3] = int32_t(vocab);  // out of range
        EXPECT_THROW(RunBackend(*k, p), Error) << k->backend;
        ids.data<int32_t>()[3] = id3;  // the next backend is checked against the same ref
      }
    }
  cov.Check<EmbeddingParams>();
}

// bf16 table: every backend copies the rows exactly (f32 rows on the host, each the bf16 value
// widened; the device backend writes bf16 rows that the device mirror widens), over hidden
// sizes that take the CUDA kernel's 16-byte path (multiples of 8 elements, one and several
// vectors a thread) and its element path (rows not a multiple of 16 bytes).
TEST(EmbeddingOp, Bf16RowsCopiedExactly) {
  PG_SEED_TRACE();
  for (int64_t hidden : {8, 96, 100, 2048, 4100, 7168, 9000}) {
    const int64_t vocab = 257, tokens = 5;
    SCOPED_TRACE(fmt::format("hidden={}", hidden));
    Tensor table(DType::kBF16, {vocab, hidden});
    uint16_t* tb = reinterpret_cast<uint16_t*>(table.view().data);
    for (int64_t i = 0; i < vocab * hidden; ++i) tb[i] = uint16_t(RandInt(0, 65535) & 0x7f7f);
    Tensor ids(DType::kI32, {tokens});
    for (int64_t i = 0; i < tokens; ++i) ids.data<int32_t>()[i] = int32_t(RandInt(0, vocab - 1));
    int ran = 0;
    for (const auto* k : Backends<EmbeddingParams>()) {
      Tensor out(DType::kF32, {tokens, hidden});
      if (!RunBackend(*k, EmbeddingParams{table.view(), ids.view(), out.view()})) continue;
      ++ran;
      for (int64_t t = 0; t < tokens; ++t) {
        const uint16_t* want = tb + ids.data<int32_t>()[t] * hidden;
        for (int64_t i = 0; i < hidden; ++i) {
          uint32_t bits = 0;
          std::memcpy(&bits, out.data<float>() + t * hidden + i, 4);
          ASSERT_EQ(bits, uint32_t(want[i]) << 16) << k->backend << " token " << t << " i " << i;
        }
      }
    }
    EXPECT_GE(ran, 1);
  }
}

TEST(RmsNormOp, EveryBackendMatchesReference) {
  PG_SEED_TRACE();
  Coverage cov;
  for (int64_t rows : {1, 19})
    for (int64_t hidden : {1, 111, 576})
      for (bool fused : {false, true}) {
        SCOPED_TRACE(fmt::format("rows={} hidden={} fused={}", rows, hidden, fused));
        Tensor x(DType::kF32, {rows, hidden}), w(DType::kF32, {hidden}), res(DType::kF32, {rows, hidden});
        FillNormal(x, 0.3f, 2.0f);
        FillNormal(w, 1.0f, 0.2f);
        FillNormal(res);
        RoundToBf16(x);  // bf16-representable: on a bf16 device res + x is then exact before
        RoundToBf16(res);  // its one rounding (no input rounding amplified by cancellation)
        // A row whose normalised input is exactly zero (hidden = 1 draws x = -res now and then)
        // has an all-zero output, which checks nothing: make its first element x = 1, res = 0
        // (both bf16-exact).
        for (int64_t r = 0; r < rows; ++r) {
          double ss = 0;
          for (int64_t i = 0; i < hidden; ++i) {
            const double v = double(x.data<float>()[r * hidden + i]) + (fused ? res.data<float>()[r * hidden + i] : 0.0f);
            ss += v * v;
          }
          if (ss == 0) x.data<float>()[r * hidden] = 1.0f, res.data<float>()[r * hidden] = 0.0f;
        }
        const std::vector<float> res0 = Copy(res);
        Tensor ref_out(DType::kF32, {rows, hidden});
        RmsNormParams p{x.view(), w.view(), ref_out.view(), fused ? res.view() : TensorView{}, 1e-5f};
        RunWith(RefImpl<RmsNormParams>(), p);
        const std::vector<float> ref_res = Copy(res);
        for (const auto* k : Backends<RmsNormParams>()) {
          Restore(res, res0);
          Tensor out(DType::kF32, {rows, hidden});
          p.out = out.view();
          if (!RunBackend(*k, p)) continue;
          cov.Ran(k->backend);
          const Tolerance tol = OnDevice(*k) ? kBf16 : kRowwise;
          ExpectClose(ref_out.data<float>(), out.data<float>(), out.numel(), tol, k->backend);
          if (fused && OnDevice(*k))  // bf16 residual: round(round(res) + round(x))
            ExpectClose(ref_res.data(), res.data<float>(), res.numel(), kBf16, k->backend + " residual");
          else if (fused)
            ExpectExact(ref_res.data(), res.data<float>(), res.numel(), k->backend + " residual");
          if (!fused) {  // in place: out aliases x
            Tensor xi(DType::kF32, {rows, hidden});
            Restore(xi, Copy(x));
            ASSERT_TRUE(RunBackend(*k, RmsNormParams{xi.view(), w.view(), xi.view(), {}, 1e-5f}));
            ExpectClose(ref_out.data<float>(), xi.data<float>(), xi.numel(), tol,
                        k->backend + " in place");
          }
        }
        p.out = ref_out.view();
      }
  cov.Check<RmsNormParams>();
}

// A bf16 device rounds RoPE's inputs a, b and its output y = a c - b s (or a s + b c; the angle
// is the same f32 product on both sides) once each, every rounding at most 2^-8 relative (bf16
// unit roundoff), so |y_dev - y_ref| <= 2^-8 (|a| + |b| + |y|) <= 2^-8 (2 max|x| + max|y|). A
// Gaussian row reaches ~4.5 rms, where one bf16 ulp alone is 0.031 rms (above kBf16's 0.03).
Tolerance RopeBf16Tolerance(const std::vector<float>& in, const std::vector<float>& ref) {
  double ss = 0, max_in = 0, max_out = 0;
  for (float v : in) max_in = std::max(max_in, double(std::fabs(v)));
  for (float v : ref) ss += double(v) * v, max_out = std::max(max_out, double(std::fabs(v)));
  const double rms = std::sqrt(ss / double(std::max<size_t>(ref.size(), 1)));
  const double bound = (2.0 * max_in + max_out) / 256.0;
  return {std::max(kBf16.max_rel, rms > 0 ? bound / rms : 0.0), kBf16.nmse};
}

TEST(RopeOp, EveryBackendMatchesReference) {
  PG_SEED_TRACE();
  Coverage cov;
  struct Scal { RopeScaling s; float factor; };
  const Scal scalings[] = {{RopeScaling::kNone, 1}, {RopeScaling::kLlama3, 8},
                           {RopeScaling::kYarn, 4}, {RopeScaling::kLinear, 2.5f}};
  for (auto [scaling, factor] : scalings)
    for (bool neox : {true, false})
      for (auto [heads, head_dim, rotary] : {std::tuple{9, 64, 0}, std::tuple{3, 80, 0},
                                             std::tuple{5, 64, 32}}) {
        const int64_t tokens = 19;
        SCOPED_TRACE(fmt::format("scaling={} neox={} heads={} d={} rot={}", int(scaling), neox,
                                 heads, head_dim, rotary));
        RopeConfig c;
        c.theta = scaling == RopeScaling::kLlama3 ? 500000.0f : 10000.0f;
        c.neox = neox;
        c.rotary_dim = rotary;
        c.scaling = scaling;
        c.factor = factor;
        c.original_max_position = scaling == RopeScaling::kYarn ? 4096 : 8192;
        Tensor x(DType::kF32, {tokens, heads, head_dim}), pos(DType::kI32, {tokens});
        FillNormal(x);
        for (int64_t t = 0; t < tokens; ++t) pos.data<int32_t>()[t] = int32_t(RandInt(0, 40000));
        pos.data<int32_t>()[0] = 0;
        const std::vector<float> x0 = Copy(x);
        RunWith(RefImpl<RopeParams>(), RopeParams{x.view(), pos.view(), c});
        const std::vector<float> ref = Copy(x);
        if (rotary) {  // dims past rotary_dim pass through untouched
          for (int64_t i = 0; i < x.numel(); ++i)
            if (i % head_dim >= rotary) {
              ASSERT_EQ(ref[size_t(i)], x0[size_t(i)]);
            }
        }
        for (const auto* k : Backends<RopeParams>()) {
          Restore(x, x0);
          RopeParams p{x.view(), pos.view(), c};
          if (!RunBackend(*k, p)) continue;
          cov.Ran(k->backend);
          ExpectClose(ref.data(), x.data<float>(), x.numel(),
                      OnDevice(*k) ? RopeBf16Tolerance(x0, ref) : kRowwise, k->backend);
        }
      }
  cov.Check<RopeParams>();
}

// A bf16 device's SwiGlu rounds each output once: at most half a bf16 ulp, <= 2^-8 |out|. The
// products of this case's gate range reach ~10x rms(out), so the worst element alone may be
// 2^-8 * max|ref| / rms(ref) off (0.03 of rms and more); kBf16 below that.
Tolerance Bf16OutputTolerance(const Tensor& ref) {
  return MagnitudeScaledTolerance(ref, kBf16, 1.0 / 256.0);
}

TEST(SwiGluOp, EveryBackendMatchesReference) {
  PG_SEED_TRACE();
  Coverage cov;
  for (int64_t rows : {1, 19})
    for (int64_t inter : {111, 1536})
      for (bool fused : {true, false}) {
        SCOPED_TRACE(fmt::format("rows={} inter={} fused={}", rows, inter, fused));
        Tensor gate(DType::kF32, {rows, fused ? 2 * inter : inter}), up(DType::kF32, {rows, inter});
        FillUniform(gate, -100.0f, 30.0f);  // reaches exp's clamp range on both sides
        FillNormal(up);
        RoundToBf16(gate);  // bf16-representable: a bf16 device then differs only by its
        RoundToBf16(up);    // arithmetic and output rounding, not by input rounding
        Tensor ref_out(DType::kF32, {rows, inter});
        SwiGluParams p{gate.view(), fused ? TensorView{} : up.view(), ref_out.view()};
        RunWith(RefImpl<SwiGluParams>(), p);
        for (const auto* k : Backends<SwiGluParams>()) {
          Tensor out(DType::kF32, {rows, inter});
          p.out = out.view();
          if (!RunBackend(*k, p)) continue;
          cov.Ran(k->backend);
          ExpectClose(ref_out.data<float>(), out.data<float>(), out.numel(),
                      OnDevice(*k) ? Bf16OutputTolerance(ref_out) : kRowwise, k->backend);
        }
      }
  cov.Check<SwiGluParams>();
}

TEST(AddOp, EveryBackendIsExact) {
  PG_SEED_TRACE();
  Coverage cov;
  for (int64_t n : {1, 111, 19 * 576, 989 * 111}) {
    Tensor a(DType::kF32, {n}), b(DType::kF32, {n}), ref_out(DType::kF32, {n});
    FillNormal(a);
    FillNormal(b);
    RoundToBf16(a);  // bf16-representable, so a bf16 device's sum is exact after rounding
    RoundToBf16(b);
    RunWith(RefImpl<AddParams>(), {a.view(), b.view(), ref_out.view()});
    for (const auto* k : Backends<AddParams>()) {
      Tensor out(DType::kF32, {n});
      AddParams p{a.view(), b.view(), out.view()};
      if (!RunBackend(*k, p)) continue;
      cov.Ran(k->backend);
      ExpectExactFor(*k, ref_out.data<float>(), out.data<float>(), n, k->backend);
    }
  }
  cov.Check<AddParams>();
}

TEST(KvWriteOp, EveryBackendWritesTheSameSlots) {
  PG_SEED_TRACE();
  Coverage cov;
  for (int page_size : {16, 7})
    for (auto [kvh, d] : {std::pair{2, 64}, std::pair{3, 80}}) {
      PagedBatch pb({{1, 100}, {37, 50}, {19, 19}, {5, 21}}, page_size, /*spare_pages=*/3);
      const int64_t tokens = pb.batch.num_tokens();
      Tensor k(DType::kF32, {tokens, kvh, d}), v(DType::kF32, {tokens, kvh, d});
      FillNormal(k);
      FillNormal(v);
      Tensor kc(DType::kF32, {pb.num_pages, page_size, kvh, d}), vc(DType::kF32, {pb.num_pages, page_size, kvh, d});
      FillNormal(kc);
      FillNormal(vc);
      for (const Tensor* t : {&k, &v, &kc, &vc}) RoundToBf16(*t);  // exact on bf16 caches too
      const std::vector<float> kc0 = Copy(kc), vc0 = Copy(vc);
      KvWriteParams p{k.view(), v.view(), {kc.view(), vc.view()}, &pb.batch};
      RunWith(RefImpl<KvWriteParams>(), p);
      const std::vector<float> kref = Copy(kc), vref = Copy(vc);
      EXPECT_NE(kref, kc0);
      for (const auto* impl : Backends<KvWriteParams>()) {
        Restore(kc, kc0);
        Restore(vc, vc0);
        if (!RunBackend(*impl, p)) continue;
        cov.Ran(impl->backend);
        ExpectExact(kref.data(), kc.data<float>(), kc.numel(), impl->backend + " k");
        ExpectExact(vref.data(), vc.data<float>(), vc.numel(), impl->backend + " v");
      }
    }
  cov.Check<KvWriteParams>();
}

}  // namespace
}  // namespace pg::ops::testing
