// ops_mega.h: the composition every step is defined as, and MakeMegaPlan for builds without
// CUDA (the CUDA plan is kernels/cuda/mega/mega_plan.cpp).
#include "kernels/ops_mega.h"

#include <atomic>

#include "kernels/ops.h"
#include "kernels/ops_fused.h"
#include "core/status.h"

namespace pg::ops {

void RunMegaStepsComposed(std::span<const MegaStepParams> steps, TensorView normed,
                          TensorView projected) {
  for (const MegaStepParams& s : steps) {
    const int64_t k = s.w.dim(1), m = s.w.dim(0);
    TensorView nv = normed, pv = projected;
    nv.ndim = pv.ndim = 2;
    nv.shape = {1, k};
    nv.strides = {k, 1};
    pv.shape = {1, m};
    pv.strides = {m, 1};
    switch (s.kind) {
      case MegaStepKind::kAccumulate:
        Matmul({.x = s.x, .w = s.w, .out = s.out, .accumulate = true});
        break;
      case MegaStepKind::kNormProject:
        FusedMatmul({.x = s.x, .norm_weight = s.norm_weight, .eps = s.eps, .w = s.w,
                     .bias = s.bias, .out = s.out, .normed = nv});
        break;
      case MegaStepKind::kNormSwiGlu:
        FusedMatmul({.x = s.x, .norm_weight = s.norm_weight, .eps = s.eps, .w = s.w,
                     .swiglu = true, .out = s.out, .normed = nv, .projected = pv});
        break;
      case MegaStepKind::kAttention:
        PG_CHECK(false, "RunMegaStepsComposed: attention steps run through RopeKvWrite + Attention");
    }
  }
}

namespace {
std::atomic<int64_t> g_mega_launches{0};
}  // namespace

int64_t MegaLaunches() { return g_mega_launches.load(); }
void CountMegaLaunch() { g_mega_launches.fetch_add(1); }

bool MegaAttentionFits(const MegaRunInputs& in) {
  const AttentionBatch* b = in.batch;
  if (b == nullptr || b->device == nullptr || b->num_seqs != 1 || b->q_len.size() != 1 ||
      b->q_len[0] != 1 || b->num_tokens() != 1)
    return false;
  for (const KvCacheView& c : in.caches)
    if (c.k_cache.dtype != DType::kBF16 || c.v_cache.dtype != DType::kBF16 ||
        c.k_cache.device != Device::kCuda || c.k_scale != 1.0f || c.v_scale != 1.0f)
      return false;
  return !in.caches.empty();
}

#ifndef PEREGRINE_HAVE_CUDA
std::unique_ptr<MegaPlan> MakeMegaPlan(std::span<const MegaStepParams>, std::string* why_not) {
  if (why_not) *why_not = "built without CUDA";
  return nullptr;
}
#endif

}  // namespace pg::ops
