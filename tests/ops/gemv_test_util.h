// Helpers of the device GEMV tests (gemv_ring_test.cpp, fp8_ring_mma_test.cpp): device
// buffers, bf16 rows for upload, and an fp8 case (inputs, CPU reference = ground truth,
// device copies, Fp8GemvArgs).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/quant.h"
#include "kernels/cuda/moe/moe_params.h"
#include "kernels/ops_fused.h"
#include "op_test_util.h"  // (and device_mirror.h: PG_TEST_CUDA)

namespace pg::ops::testing {

// Device copy of a host buffer.
struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) { PG_TEST_CUDA(cudaMalloc(&p, bytes)); }
  Dev(const void* host, size_t bytes) : Dev(bytes) {
    PG_TEST_CUDA(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
  }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
};

// Uploads `init` (bf16 bits) into out, runs launch() and returns out widened to f32.
template <typename F>
std::vector<float> RunIntoBf16(const Dev& out, const std::vector<uint16_t>& init, F&& launch) {
  PG_TEST_CUDA(cudaMemcpy(out.p, init.data(), init.size() * 2, cudaMemcpyHostToDevice));
  launch();
  PG_TEST_CUDA(cudaGetLastError());
  PG_TEST_CUDA(cudaDeviceSynchronize());
  std::vector<uint16_t> h(init.size());
  PG_TEST_CUDA(cudaMemcpy(h.data(), out.p, h.size() * 2, cudaMemcpyDeviceToHost));
  std::vector<float> got(h.size());
  for (size_t i = 0; i < h.size(); ++i) got[i] = Bf16ToF32(h[i]);
  return got;
}

// A norm weight [k] as the fused kernels take it: bf16 (nw's values rounded) or f32.
inline Tensor NormWeightOf(const Tensor& nw, bool bf16) {
  const int64_t k = nw.view().dim(0);
  Tensor t = bf16 ? Tensor(DType::kBF16, {k}) : Tensor(DType::kF32, {k});
  if (bf16)
    for (int64_t i = 0; i < k; ++i) t.data<uint16_t>()[i] = F32ToBf16(nw.data<float>()[i]);
  else Restore(t, Copy(nw));
  return t;
}

// FusedMatmul params of a ring-kernel fused case (optional norm weight, bias and w scale).
struct FusedInputs {
  const Tensor& x;
  const Tensor* norm_weight;
  const Tensor& w;
  const Tensor* bias;
  const Tensor* w_scale;
  bool swiglu;
  const Tensor& normed;     // [n, k] scratch of the composition
  const Tensor& projected;  // [n, w rows] scratch of the composition
};
inline FusedMatmulParams FusedParamsOf(const FusedInputs& in, const Tensor& out) {
  FusedMatmulParams p;
  p.x = in.x.view();
  if (in.norm_weight) p.norm_weight = in.norm_weight->view();
  p.eps = 1e-5f;
  p.w = in.w.view();
  if (in.bias) p.bias = in.bias->view();
  if (in.w_scale) p.w_scale = in.w_scale->view();
  p.swiglu = in.swiglu;
  p.out = out.view();
  p.normed = in.normed.view();
  p.projected = in.projected.view();
  return p;
}

// bf16 bits of an f32 [rows, cols] matrix, rows `ld` apart.
inline std::vector<uint16_t> Bf16Rows(const float* v, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<uint16_t> out(size_t(rows * ld), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[size_t(r * ld + c)] = F32ToBf16(v[r * cols + c]);
  return out;
}

// An fp8 case's reference: out_init (normal values rounded to bf16, the device output's
// initial contents) and ref = the reference Matmul of x, w, scale (and bias) onto a copy of it
// (accumulate) or in its place.
struct Fp8Ref {
  Tensor out_init, ref;
};
inline Fp8Ref Fp8Reference(const Tensor& x, const Tensor& w, const Tensor& scale, const Tensor* bias,
                    bool accumulate) {
  const int64_t n = x.view().dim(0), m = w.view().dim(0);
  Fp8Ref r{Tensor(DType::kF32, {n, m}), Tensor(DType::kF32, {n, m})};
  FillNormal(r.out_init);
  RoundToBf16(r.out_init);
  Restore(r.ref, Copy(r.out_init));
  MatmulParams p{.x = x.view(), .w = w.view(), .out = r.ref.view(), .w_scale = scale.view()};
  if (bias) p.bias = bias->view();
  p.accumulate = accumulate;
  RunWith(RefImpl<MatmulParams>(), p);
  return r;
}

// Weights of an fp8 case: e4m3 of N(0, 1) (kNormal); only the 16 subnormal / zero codes
// (kSubnormal: |w| <= 7 * 2^-9, a bf16 subnormal times 2^-120 in the tensor-core kernels);
// uniform over the 254 finite codes (kAllCodes; the two NaN codes become +-448).
enum class Fp8Weights { kNormal, kSubnormal, kAllCodes };

// One fp8 GEMV case: x [n, k] (bf16-representable, rows k + xpad apart on the device), w
// [m, k] e4m3, scales by `mode` (uniform in [scale_lo, scale_hi]), bias [m], the reference
// and the kernel arguments on device copies (out starts as ref.out_init).
struct Fp8Problem {
  Tensor x, w, scale, bias;
  Fp8Ref ref;
  std::vector<uint16_t> out_init;  // bf16 bits, [n, m]
  std::unique_ptr<Dev> dx, dw, dscale, dbias, dout;
  cuda::Fp8GemvArgs args{};
  // Re-initialises the device output, runs launch() (on args) and returns the output widened.
  template <typename F>
  std::vector<float> Run(F&& launch) const {
    return RunIntoBf16(*dout, out_init, launch);
  }
};

struct Fp8ProblemSpec {
  int64_t n, k, m;
  cuda::ScaleMode mode;
  bool bias = false, accumulate = false;
  int64_t xpad = 0;
  Fp8Weights weights = Fp8Weights::kNormal;
  float scale_lo = 0.01f, scale_hi = 0.03f;
};

inline std::unique_ptr<Fp8Problem> MakeFp8Problem(const Fp8ProblemSpec& c) {
  auto pr = std::make_unique<Fp8Problem>();
  const int64_t ldx = c.k + c.xpad;
  pr->x = Tensor(DType::kF32, {c.n, c.k});
  pr->bias = Tensor(DType::kF32, {c.m});
  FillNormal(pr->x);
  RoundToBf16(pr->x);
  FillNormal(pr->bias);
  pr->w = Tensor(DType::kF8E4M3, {c.m, c.k});
  if (c.weights == Fp8Weights::kNormal) {
    Tensor wf(DType::kF32, {c.m, c.k});
    FillNormal(wf, 0.0f, 1.0f);
    for (int64_t r = 0; r < c.m; ++r)
      quant::QuantizeRow(DType::kF8E4M3, wf.data<float>() + r * c.k, pr->w.view().row_ptr(r), c.k);
  } else {
    uint8_t* pw = pr->w.data<uint8_t>();
    for (int64_t i = 0; i < c.m * c.k; ++i) {
      uint8_t v = c.weights == Fp8Weights::kSubnormal ? uint8_t(RandInt(0, 7) | (RandInt(0, 1) << 7))
                                                      : uint8_t(RandInt(0, 253));
      if (c.weights == Fp8Weights::kAllCodes && (v & 0x7F) == 0x7F) v ^= 1;
      pw[i] = v;
    }
  }
  using M = cuda::ScaleMode;
  pr->scale = c.mode == M::kTensor    ? Tensor(DType::kF32, {1})
              : c.mode == M::kChannel ? Tensor(DType::kF32, {c.m})
                                      : Tensor(DType::kF32, {(c.m + 127) / 128, (c.k + 127) / 128});
  FillUniform(pr->scale, c.scale_lo, c.scale_hi);
  pr->ref = Fp8Reference(pr->x, pr->w, pr->scale, c.bias ? &pr->bias : nullptr, c.accumulate);
  const std::vector<uint16_t> xb = Bf16Rows(pr->x.data<float>(), c.n, c.k, ldx);
  pr->out_init = Bf16Rows(pr->ref.out_init.data<float>(), c.n, c.m, c.m);
  pr->dx = std::make_unique<Dev>(xb.data(), xb.size() * 2);
  pr->dw = std::make_unique<Dev>(pr->w.data<uint8_t>(), size_t(c.m * c.k));
  pr->dscale = std::make_unique<Dev>(pr->scale.data<float>(), size_t(pr->scale.numel()) * 4);
  pr->dbias = std::make_unique<Dev>(pr->bias.data<float>(), size_t(c.m) * 4);
  pr->dout = std::make_unique<Dev>(pr->out_init.size() * 2);
  cuda::Fp8GemvArgs& a = pr->args;
  a.x = static_cast<const cuda::bf16*>(pr->dx->p);
  a.w = static_cast<const uint8_t*>(pr->dw->p);
  a.scale = static_cast<const float*>(pr->dscale->p);
  a.scale_mode = c.mode;
  a.scale_ld = int((c.k + 127) / 128);
  a.out = static_cast<cuda::bf16*>(pr->dout->p);
  a.bias = c.bias ? static_cast<const float*>(pr->dbias->p) : nullptr;
  a.n = c.n, a.k = c.k, a.m = c.m, a.ldx = ldx, a.ldw = c.k, a.ldo = c.m;
  a.accumulate = c.accumulate;
  return pr;
}

}  // namespace pg::ops::testing
