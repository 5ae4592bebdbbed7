// RopeKvWriteAttention (ops_fused_attention.h): validation as the composition it stands for,
// the reference (the composition of the reference kernels) and the unfused CPU fallback.
#include <string_view>
#include <type_traits>

#include "kernels/ops_fused_attention.h"

#include "core/env.h"
#include "kernels/registry.h"
#include "kernels/validate.h"

namespace pg::ops {
namespace {

void RunRef(const RopeKvWriteAttentionParams& p) { RunRopeKvWriteAttentionComposed(p, true); }
void RunComposed(const RopeKvWriteAttentionParams& p) { RunRopeKvWriteAttentionComposed(p, false); }

}  // namespace

AttentionParams AttentionStepOf(const RopeKvWriteAttentionParams& p) {
  return {.q = p.rope.q, .out = p.out, .cache = p.rope.cache, .batch = p.rope.batch,
          .scale = p.scale, .sliding_window = p.sliding_window, .logit_softcap = p.logit_softcap};
}

void Validate(const RopeKvWriteAttentionParams& p) {
  constexpr std::string_view op = "RopeKvWriteAttention";
  PG_OP_NEED(p.out.data != p.rope.q.data || p.out.numel() == 0, op, "out must not alias q");
  NeedL2Hint(op, p.l2_after, p.out.device);
  Validate(p.rope);
  Validate(AttentionStepOf(p));
}

Device DeviceOf(const RopeKvWriteAttentionParams& p) { return p.out.device; }
std::string_view OpName(const RopeKvWriteAttentionParams&) { return "RopeKvWriteAttention"; }

void RunRopeKvWriteAttentionComposed(const RopeKvWriteAttentionParams& p, bool reference) {
  const Registry& r = Registry::Global();
  auto run = [&](const auto& params) {
    using P = std::decay_t<decltype(params)>;
    if (reference) RunWith(*r.table<P>().Find("ref"), params);
    else r.Run(params);
  };
  run(p.rope);
  run(AttentionStepOf(p));
}

void RopeKvWriteAttention(const RopeKvWriteAttentionParams& p) { Registry::Global().Run(p); }

// Read per call (host side, once per layer when a step is launched or captured; graph replays
// never ask), so one process can compare both routes (tests/models/mega_model_test.cpp).
bool FusedAttentionEnabled() { return EnvFlag("PEREGRINE_FUSED_ATTN", true); }

void RegisterFusedAttentionKernels(Registry& r) {
  using K = KernelImpl<RopeKvWriteAttentionParams>;
  r.Register(K{"ref", Device::kCpu, kPriorityRef, {}, &RunRef});
  // The composition on each step's fastest backend (CUDA registers the fused kernel and its
  // own composed fallback: cuda/cuda_register.cpp).
  r.Register(K{"cpu_composed", Device::kCpu, kPriorityCpuGeneric, {}, &RunComposed});
}

}  // namespace pg::ops
