// Device fill of random values (dummy weights, benchmark KV caches): no host copy, so the
// weights of an 8B-parameter shape are made in milliseconds.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace pg::cuda {

struct FillRandomArgs {
  void* dst;          // `count` elements of bf16 (is_bf16), fp8 e4m3 (is_fp8) or f32
  int64_t count;
  bool is_bf16;
  float mean, std;    // values: mean + std * z, z approximately N(0, 1) (sum of 4 uniforms)
  uint64_t seed;      // the values are a pure function of (seed, element index)
  bool is_fp8 = false;  // e4m3, saturating (dummy fp8 weights)
};
void LaunchFillRandom(const FillRandomArgs& a, cudaStream_t stream);

}  // namespace pg::cuda
