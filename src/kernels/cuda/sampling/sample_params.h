// Parameters of the device sampling kernel (sample.cu); ops_sample.h has the op's contract.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common/device_params.h"
#include "kernels/sample_math.h"

namespace pg::cuda {

struct SampleArgs {
  const void* logits;          // [n, vocab], row stride ld elements; bf16 or f32
  bool logits_bf16;
  int64_t ld;
  int64_t n;
  int vocab;
  const ops::SampleRow* rows;  // [n]
  int32_t* counts;             // optional [*, vocab] (sample_math.h encoding)
  bool update_counts;
  int32_t* tokens;             // [n] out
  float* logprobs;             // optional [n] out
  int cluster = 1;             // blocks per row, one thread-block cluster (set by LaunchSample)
};
void LaunchSample(const SampleArgs& a, cudaStream_t stream);

}  // namespace pg::cuda
