// FusedMatmul (ops_fused.h): validation as the composition it stands for, the reference
// (the composition of the reference kernels) and the unfused fallback backends.
#include <string_view>
#include <type_traits>

#include "kernels/ops_fused.h"
#include "kernels/registry.h"
#include "kernels/validate.h"

namespace pg::ops {
namespace {

// The steps of the composition, over the caller's tensors and scratch.
struct Steps {
  RmsNormParams norm;
  MatmulParams matmul;
  SwiGluParams swiglu;
};

Steps StepsOf(const FusedMatmulParams& p) {
  Steps s;
  const bool norm = p.norm_weight.data != nullptr;
  const int64_t n = p.x.dim(0);
  TensorView normed = norm && p.normed.data ? p.normed.Slice0(0, n) : p.normed;
  TensorView projected = p.swiglu && p.projected.data ? p.projected.Slice0(0, n) : p.projected;
  s.norm = {.x = p.x, .weight = p.norm_weight, .out = normed, .eps = p.eps};
  s.matmul = {.x = norm ? normed : p.x, .w = p.w, .out = p.swiglu ? projected : p.out,
              .bias = p.bias, .w_scale = p.w_scale, .accumulate = p.accumulate};
  s.swiglu = {.gate = projected, .out = p.out};
  return s;
}

void RunRef(const FusedMatmulParams& p) { RunFusedMatmulComposed(p, /*reference=*/true); }
void RunComposed(const FusedMatmulParams& p) { RunFusedMatmulComposed(p, /*reference=*/false); }

}  // namespace

void Validate(const FusedMatmulParams& p) {
  constexpr std::string_view op = "FusedMatmul";
  PG_OP_NEED(p.x.ndim == 2 && p.out.ndim == 2, op, "x {} and out {} must be 2-D", p.x.ShapeString(),
             p.out.ShapeString());
  const int64_t n = p.x.dim(0);
  if (p.norm_weight.data)
    PG_OP_NEED(p.normed.ndim == 2 && p.normed.dim(0) >= n, op,
               "normed scratch {} must have at least {} rows", p.normed.ShapeString(), n);
  if (p.swiglu)
    PG_OP_NEED(p.projected.ndim == 2 && p.projected.dim(0) >= n, op,
               "projected scratch {} must have at least {} rows", p.projected.ShapeString(), n);
  PG_OP_NEED(p.out.data != p.x.data || p.x.numel() == 0, op, "out must not alias x");
  PG_OP_NEED(!(p.accumulate && p.swiglu), op, "accumulate is not taken with swiglu");
  const Steps s = StepsOf(p);
  if (p.norm_weight.data) Validate(s.norm);
  Validate(s.matmul);
  if (p.swiglu) Validate(s.swiglu);
}

Device DeviceOf(const FusedMatmulParams& p) { return p.out.device; }
std::string_view OpName(const FusedMatmulParams&) { return "FusedMatmul"; }

void RunFusedMatmulComposed(const FusedMatmulParams& p, bool reference) {
  const Steps s = StepsOf(p);
  const Registry& r = Registry::Global();
  auto run = [&](const auto& params) {
    using P = std::decay_t<decltype(params)>;
    if (reference) RunWith(*r.table<P>().Find("ref"), params);
    else r.Run(params);
  };
  if (p.norm_weight.data) run(s.norm);
  run(s.matmul);
  if (p.swiglu) run(s.swiglu);
}

void FusedMatmul(const FusedMatmulParams& p) { Registry::Global().Run(p); }

void RegisterFusedKernels(Registry& r) {
  r.Register(KernelImpl<FusedMatmulParams>{"ref", Device::kCpu, kPriorityRef, {}, &RunRef});
  // The composition on each step's fastest backend. (CUDA registers its own composed
  // fallback next to the fused kernel: cuda/gemm/gemv_register.cpp.)
  r.Register(KernelImpl<FusedMatmulParams>{"cpu_composed", Device::kCpu, kPriorityCpuGeneric, {},
                                           &RunComposed});
}

}  // namespace pg::ops
