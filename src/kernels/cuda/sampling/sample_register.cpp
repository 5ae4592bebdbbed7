// The CUDA backend of ops::Sample (launcher + registry entry), registered by
// RegisterCudaKernels (cuda_register.cpp).
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/sampling/sample_params.h"
#include "kernels/registry.h"

namespace pg::ops {
namespace {

bool OnCuda(const TensorView& t) { return !t.data || t.device == Device::kCuda; }

bool SampleSupports(const SampleParams& p) {
  return p.logits.device == Device::kCuda && OnCuda(p.rows) && OnCuda(p.token_counts) &&
         OnCuda(p.tokens) && OnCuda(p.logprobs) && p.logits.dim(1) <= INT32_MAX;
}

void RunSample(const SampleParams& p) {
  cuda::SampleArgs a{};
  a.logits = p.logits.data;
  a.logits_bf16 = p.logits.dtype == DType::kBF16;
  a.ld = p.logits.strides[0];
  a.n = p.logits.dim(0);
  a.vocab = int(p.logits.dim(1));
  a.rows = RowsOf(p.rows);
  a.counts = p.token_counts.data ? p.token_counts.as<int32_t>() : nullptr;
  a.update_counts = p.update_counts;
  a.tokens = p.tokens.as<int32_t>();
  a.logprobs = p.logprobs.data ? p.logprobs.as<float>() : nullptr;
  cuda::LaunchSample(a, cuda::CurrentStream());
  PG_CUDA_CHECK_LAUNCH();
}

}  // namespace

void RegisterCudaSampleKernels(Registry& r) {
  r.Register(KernelImpl<SampleParams>{"cuda", Device::kCuda, kPriorityCuda, &SampleSupports,
                                      &RunSample});
}

}  // namespace pg::ops
