// Matmul: every backend against ref/ on awkward shapes, every weight dtype, random data;
// plus an exact check on integer-valued inputs (every product and partial sum is an
// integer below 2^24, so every correct backend must agree with ref bit for bit).
#include <fmt/format.h>

#include "core/quant.h"
#include "op_test_util.h"

namespace pg::ops::testing {
namespace {

// Tolerances, relative to rms(ref output):
//  * backends that quantize activations to int8 blocks (names "*_q8"): per-block scale
//    amax/127 gives ~0.4% relative error per element, ~0.7% of rms per output, tails to 5x;
//  * f32-accumulating backends: rounding of k-term float sums only.
constexpr Tolerance kInt8Act{0.06, 2e-4};
constexpr Tolerance kFloat{2e-5, 1e-10};

// cuda_fp8_lt quantizes the activations to e4m3 with one dynamic per-tensor scale (Hopper's
// fp8 GEMM takes fp8 operands only): each x_i is off by up to 2^-4 of itself (half a step of a
// 3-bit mantissa), ~3.6% rms, so the output's nmse is ~1.3e-3 (bound 3e-3) and its worst
// element ~5 sigma of 3.6% of rms (bound 0.25); bf16 output rounding adds little. A wrong
// scale is off by a factor, a wrong layout by nmse ~2.
constexpr Tolerance kFp8Act{0.25, 3e-3};

// Both error measures divide by rms(ref) estimated from the case's n·m outputs. The int8
// error of an output does not shrink with it, so with few outputs (a case of n·m = 7) a
// chance cancellation in Σ ref² inflates them: χ²(7)'s 0.1% quantile is 0.6, i.e. 12x below
// its mean. Below 32 outputs the int8 bounds widen by 32 / (n·m) (nmse) and its root (max).
Tolerance TolFor(const std::string& backend, int64_t outputs) {
  if (!backend.ends_with("_q8")) return kFloat;
  const double widen = std::max(1.0, 32.0 / double(std::max<int64_t>(outputs, 1)));
  return {kInt8Act.max_rel * std::sqrt(widen), kInt8Act.nmse * widen};
}
Tolerance DeviceTolFor(const std::string& backend) {
  return backend == "cuda_fp8_lt" ? kFp8Act : kBf16;
}

// A weight [m, k] of dtype `dt` with random contents. Types with a reference quantizer are
// quantized from N(0, 1) floats; the others (Q5_x, K-quants) get random bytes with small
// positive f16 block scales (every bit pattern of their integer fields is valid).
Tensor RandomWeight(DType dt, int64_t m, int64_t k) {
  Tensor w(dt, {m, k});
  const bool has_quantizer = dt == DType::kF32 || dt == DType::kF16 || dt == DType::kBF16 ||
                             dt == DType::kF8E4M3 || dt == DType::kQ8_0 || dt == DType::kQ4_0 || dt == DType::kQ4_1;
  if (!has_quantizer) {
    uint8_t* p = w.data<uint8_t>();
    for (int64_t i = 0; i < w.nbytes(); ++i) p[i] = uint8_t(RandInt(0, 255));
    const int64_t bb = Info(dt).block_bytes, nb = w.nbytes() / bb;
    for (int64_t b = 0; b < nb; ++b) {
      uint16_t d = F32ToF16(float(RandInt(5, 40)) * 1e-4f);
      uint16_t dmin = F32ToF16(float(RandInt(5, 40)) * 1e-4f);
      uint8_t* blk = p + b * bb;
      if (dt == DType::kQ6_K) {
        std::memcpy(blk + bb - 2, &d, 2);
      } else {
        std::memcpy(blk, &d, 2);
        if (dt != DType::kQ5_0) std::memcpy(blk + 2, &dmin, 2);  // Q5_1 m, K-quant dmin
      }
    }
    return w;
  }
  std::vector<float> row(static_cast<size_t>(k));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t j = 0; j < m; ++j) {
    for (float& v : row) v = dist(Rng());
    quant::QuantizeRow(dt, row.data(), w.view().row_ptr(j), k);
  }
  return w;
}

// fp8 weights' w_scale (ops.h): none (other dtypes), per tensor, per output channel,
// 128x128 blocks.
enum class Scale { kNone, kTensor, kChannel, kBlock };

struct Case {
  DType dt;
  int64_t n, k, m;
  bool bias = false, accumulate = false, strided = false;
  Scale scale = Scale::kNone;
  std::string Name() const {
    return fmt::format("{} n={} k={} m={}{}{}{}{}", Name(dt), n, k, m, bias ? " bias" : "",
                       accumulate ? " acc" : "", strided ? " strided" : "",
                       scale == Scale::kNone      ? ""
                       : scale == Scale::kTensor  ? " scale/tensor"
                       : scale == Scale::kChannel ? " scale/channel"
                                                  : " scale/block");
  }
  static std::string_view Name(DType t) { return pg::Name(t); }
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  const DType legacy[] = {DType::kQ4_1, DType::kQ8_0, DType::kQ4_0, DType::kF32, DType::kF16,
                          DType::kBF16, DType::kQ5_0, DType::kQ5_1};
  const DType kquants[] = {DType::kQ4_K, DType::kQ6_K, DType::kQ5_K};
  // (n, k, m): decode sizes, the GEMV/GEMM boundary (16/17), batch 19, prefill 64.
  const int64_t shapes[][3] = {{1, 96, 111}, {1, 576, 67}, {2, 160, 129}, {7, 96, 1},
                               {16, 224, 45}, {17, 96, 111}, {19, 576, 37}, {64, 160, 200}};
  for (DType dt : legacy)
    for (auto& s : shapes) cases.push_back({dt, s[0], s[1], s[2]});
  const int64_t kshapes[][3] = {{1, 256, 111}, {3, 768, 19}, {19, 512, 45}, {33, 256, 130}};
  for (DType dt : kquants)
    for (auto& s : kshapes) cases.push_back({dt, s[0], s[1], s[2]});
  // fp8 e4m3 with scales: GEMV sizes (n <= 4, k multiple of 16 and not), GEMM sizes, odd m.
  const int64_t f8shapes[][3] = {{1, 96, 111}, {3, 200, 67}, {4, 576, 129}, {5, 96, 37},
                                 {19, 256, 45}, {64, 160, 200}, {2, 300, 257},
                                 {33, 512, 256}, {128, 1024, 384},
                                 // k % 64 == 0: cuda/moe's tensor-core GEMV (n <= 8; block
                                 // scales n <= 16 in passes of 8)
                                 {1, 1024, 77}, {4, 2048, 300}, {6, 4096, 130}, {16, 512, 200}};
  for (Scale sc : {Scale::kTensor, Scale::kChannel, Scale::kBlock})
    for (auto& s : f8shapes) cases.push_back({DType::kF8E4M3, s[0], s[1], s[2], false, false, false, sc});
  cases.push_back({DType::kF8E4M3, 1, 96, 111, true, true, true, Scale::kChannel});
  cases.push_back({DType::kF8E4M3, 19, 160, 70, true, true, true, Scale::kTensor});
  // Bias, accumulate and strided rows on the model's dtypes, decode and prefill (bf16: the
  // CUDA GEMV and cuBLASLt epilogues; the llama device path accumulates into the residual).
  for (DType dt : {DType::kQ4_1, DType::kQ8_0, DType::kF32, DType::kBF16})
    for (int64_t n : {1, 19}) {
      cases.push_back({dt, n, 96, 111, true, false, false});
      cases.push_back({dt, n, 96, 111, false, true, true});
      cases.push_back({dt, n, 160, 70, true, true, true});
    }
  return cases;
}

// x: [n, k] (as a view of the first k columns of [n, k + 13] when strided).
struct Inputs {
  Tensor x_buf, w, bias, out_init, w_scale;
  TensorView x;
};

// Positive scales around 1/64..1/8 (fp8 weights of N(0,1) saturate nowhere).
Tensor RandomScale(Scale sc, int64_t m, int64_t k) {
  Tensor s;
  if (sc == Scale::kTensor) s = Tensor(DType::kF32, {1});
  if (sc == Scale::kChannel) s = Tensor(DType::kF32, {m});
  if (sc == Scale::kBlock) s = Tensor(DType::kF32, {(m + 127) / 128, (k + 127) / 128});
  if (sc != Scale::kNone) FillUniform(s, 1.0f / 64, 1.0f / 8);
  return s;
}

Inputs MakeInputs(const Case& c) {
  Inputs in;
  const int64_t ld = c.strided ? c.k + 13 : c.k;
  in.x_buf = Tensor(DType::kF32, {c.n, ld});
  FillNormal(in.x_buf);
  in.x = in.x_buf.view();
  in.x.shape[1] = c.k;
  in.w = RandomWeight(c.dt, c.m, c.k);
  in.bias = Tensor(DType::kF32, {c.m});
  FillNormal(in.bias);
  in.out_init = Tensor(DType::kF32, {c.n, c.m});
  FillNormal(in.out_init);
  in.w_scale = RandomScale(c.scale, c.m, c.k);
  return in;
}

MatmulParams Params(const Case& c, const Inputs& in, const Tensor& out) {
  MatmulParams p;
  p.x = in.x;
  p.w = in.w.view();
  p.out = out.view();
  if (c.bias) p.bias = in.bias.view();
  if (c.scale != Scale::kNone) p.w_scale = in.w_scale.view();
  p.accumulate = c.accumulate;
  return p;
}

TEST(MatmulOp, EveryBackendMatchesReference) {
  PG_SEED_TRACE();
  Coverage cov;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.Name());
    Inputs in = MakeInputs(c);
    Tensor ref_out(DType::kF32, {c.n, c.m});
    Restore(ref_out, Copy(in.out_init));
    RunWith(RefImpl<MatmulParams>(), Params(c, in, ref_out));
    for (const KernelImpl<MatmulParams>* k : Backends<MatmulParams>()) {
      Tensor out(DType::kF32, {c.n, c.m});
      Restore(out, Copy(in.out_init));
      MatmulParams p = Params(c, in, out);
      if (!RunBackend(*k, p)) continue;
      cov.Ran(k->backend);
      ExpectClose(ref_out.data<float>(), out.data<float>(), out.numel(),
                  OnDevice(*k) ? DeviceTolFor(k->backend) : TolFor(k->backend, c.n * c.m),
                  k->backend + " " + c.Name());
    }
  }
  cov.Check<MatmulParams>();
}

// Integer weights (scale 1, Q4_1 offset -8) and integer activations whose every 32-block
// holds ±127 (so int8 activation quantization is lossless): results are exact.
Tensor IntegerWeight(DType dt, int64_t m, int64_t k) {
  Tensor w(dt, {m, k});
  for (int64_t j = 0; j < m; ++j) {
    uint8_t* row = w.view().row_ptr(j);
    for (int64_t b = 0; b < k / 32; ++b) {
      if (dt == DType::kQ8_0) {
        auto* blk = reinterpret_cast<quant::BlockQ8_0*>(row) + b;
        blk->d = F32ToF16(1.0f);
        for (auto& q : blk->qs) q = int8_t(RandInt(-127, 127));
      } else if (dt == DType::kQ4_1) {
        auto* blk = reinterpret_cast<quant::BlockQ4_1*>(row) + b;
        blk->d = F32ToF16(1.0f);
        blk->m = F32ToF16(-8.0f);
        for (auto& q : blk->qs) q = uint8_t(RandInt(0, 255));
      } else if (dt == DType::kQ4_0) {
        auto* blk = reinterpret_cast<quant::BlockQ4_0*>(row) + b;
        blk->d = F32ToF16(1.0f);
        for (auto& q : blk->qs) q = uint8_t(RandInt(0, 255));
      }
    }
    if (dt == DType::kF32 || dt == DType::kF16 || dt == DType::kBF16) {
      std::vector<float> v(static_cast<size_t>(k));
      for (float& e : v) e = float(RandInt(-8, 8));
      quant::QuantizeRow(dt, v.data(), row, k);
    }
  }
  return w;
}

TEST(MatmulOp, IntegerInputsAreExactOnEveryBackend) {
  PG_SEED_TRACE();
  Coverage cov;
  for (DType dt : {DType::kQ4_1, DType::kQ8_0, DType::kQ4_0, DType::kF32, DType::kF16,
                   DType::kBF16})
    for (int64_t n : {1, 5, 19, 40}) {
      const int64_t k = 576, m = 97;
      SCOPED_TRACE(fmt::format("{} n={}", Name(dt), n));
      Tensor x(DType::kF32, {n, k});
      for (int64_t i = 0; i < x.numel(); ++i)
        x.data<float>()[i] = i % 32 == 0 ? (RandInt(0, 1) ? 127.0f : -127.0f)
                                         : float(RandInt(-127, 127));
      Tensor w = IntegerWeight(dt, m, k);
      Tensor ref_out(DType::kF32, {n, m});
      MatmulParams p{x.view(), w.view(), ref_out.view(), {}, {}, false};
      RunWith(RefImpl<MatmulParams>(), p);
      for (const KernelImpl<MatmulParams>* kimpl : Backends<MatmulParams>()) {
        Tensor out(DType::kF32, {n, m});
        p.out = out.view();
        if (!RunBackend(*kimpl, p)) continue;
        cov.Ran(kimpl->backend);
        // Integer sums are exact in f32; a bf16 device rounds only the final output.
        ExpectExactFor(*kimpl, ref_out.data<float>(), out.data<float>(), out.numel(),
                       kimpl->backend);
      }
    }
  // fp8 e4m3: integer weights in [-8, 8] and power-of-two scales are exact; activations are
  // integers in [-8, 8] with one 448 per row (amax 448: cuda_fp8_lt's dynamic activation scale
  // is then exactly 1 and its e4m3 activations are exact too).
  for (Scale sc : {Scale::kTensor, Scale::kChannel, Scale::kBlock})
    for (int64_t n : {1, 5, 19, 40}) {
      const int64_t k = 576, m = 160;
      SCOPED_TRACE(fmt::format("f8_e4m3 n={} scale {}", n, int(sc)));
      Tensor x(DType::kF32, {n, k}), w(DType::kF8E4M3, {m, k}), ref_out(DType::kF32, {n, m});
      for (int64_t i = 0; i < x.numel(); ++i)
        x.data<float>()[i] = i % k == 7 ? 448.0f : float(RandInt(-8, 8));
      for (int64_t i = 0; i < w.numel(); ++i)
        w.data<uint8_t>()[i] = F32ToF8E4M3(float(RandInt(-8, 8)));
      Tensor scale = RandomScale(sc, m, k);
      for (int64_t i = 0; i < scale.numel(); ++i)
        scale.data<float>()[i] = sc == Scale::kTensor ? 0.5f : float(1 << RandInt(0, 2)) * 0.5f;
      MatmulParams p{.x = x.view(), .w = w.view(), .out = ref_out.view(), .w_scale = scale.view()};
      RunWith(RefImpl<MatmulParams>(), p);
      for (const KernelImpl<MatmulParams>* kimpl : Backends<MatmulParams>()) {
        Tensor out(DType::kF32, {n, m});
        p.out = out.view();
        if (!RunBackend(*kimpl, p)) continue;
        cov.Ran(kimpl->backend);
        ExpectExactFor(*kimpl, ref_out.data<float>(), out.data<float>(), out.numel(),
                       kimpl->backend);
      }
    }
  cov.Check<MatmulParams>();
}

// The fp8 reference against an independent oracle: x · W^T in f32 for a weight W of
// N(0, 1) values, quantized as fp8 = e4m3(W / s) with per-channel scales s. e4m3 keeps 3
// mantissa bits: each weight is off by at most 2^-4 relative (half a step), about
// 2^-4 / sqrt(3) = 3.6% rms, so the output's nmse is about 1.3e-3 (bound 2.5e-3); a missing
// or misapplied scale is off by 8x or more.
TEST(MatmulOp, Fp8ReferenceMatchesUnquantizedWeights) {
  PG_SEED_TRACE();
  const int64_t n = 3, k = 320, m = 77;
  Tensor x(DType::kF32, {n, k}), wf(DType::kF32, {m, k}), w8(DType::kF8E4M3, {m, k});
  Tensor scale(DType::kF32, {m}), ref(DType::kF32, {n, m}), exact(DType::kF32, {n, m});
  FillNormal(x);
  FillNormal(wf);
  FillUniform(scale, 0.01f, 0.1f);
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t j = 0; j < m; ++j) {
    for (int64_t i = 0; i < k; ++i) row[size_t(i)] = wf.data<float>()[j * k + i] / scale.data<float>()[j];
    quant::QuantizeRow(DType::kF8E4M3, row.data(), w8.view().row_ptr(j), k);
  }
  RunWith(RefImpl<MatmulParams>(), MatmulParams{.x = x.view(), .w = w8.view(), .out = ref.view(), .w_scale = scale.view()});
  RunWith(RefImpl<MatmulParams>(), MatmulParams{.x = x.view(), .w = wf.view(), .out = exact.view()});
  ExpectClose(exact.data<float>(), ref.data<float>(), ref.numel(), {0.3, 2.5e-3}, "fp8 ref vs f32");
  // w_scale is required for fp8 and refused for other dtypes.
  EXPECT_THROW(Matmul({.x = x.view(), .w = w8.view(), .out = ref.view()}), Error);
  EXPECT_THROW(Matmul({.x = x.view(), .w = wf.view(), .out = ref.view(), .w_scale = scale.view()}), Error);
  Tensor bad_scale(DType::kF32, {m + 1});
  EXPECT_THROW(Matmul({.x = x.view(), .w = w8.view(), .out = ref.view(), .w_scale = bad_scale.view()}), Error);
}

TEST(MatmulOp, ShapeErrorsThrowWithShapes) {
  Tensor x(DType::kF32, {3, 64}), w(DType::kQ4_1, {10, 96}), out(DType::kF32, {3, 10});
  FillNormal(x);
  try {
    Matmul({x.view(), w.view(), out.view(), {}, {}, false});
    FAIL() << "expected pg::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("[3, 64] f32"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[10, 96] q4_1"), std::string::npos) << e.what();
  }
  Tensor w2(DType::kQ4_1, {10, 64}), bad_out(DType::kF32, {3, 11});
  EXPECT_THROW(Matmul({x.view(), w2.view(), bad_out.view(), {}, {}, false}), Error);
  Tensor x_i32(DType::kI32, {3, 64});
  EXPECT_THROW(Matmul({x_i32.view(), w2.view(), out.view(), {}, {}, false}), Error);
}

}  // namespace
}  // namespace pg::ops::testing
