// Timing helpers of the CUDA kernel benchmarks: event-timed medians, and per-call kernel time
// from CUDA-graph replay (how decode runs, so the number held against a floor).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <vector>

#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/cuda_check.h"

namespace pg::bench {

// The integers of a comma-separated flag value ("1024,8192" -> {1024, 8192}; atoi each field).
inline std::vector<int> CommaInts(const char* c) {
  std::vector<int> v;
  while (*c) {
    v.push_back(std::atoi(c));
    while (*c && *c != ',') ++c;
    if (*c == ',') ++c;
  }
  return v;
}

// An owned device allocation of the benchmarks (contents undefined).
struct DeviceBuf {
  void* p = nullptr;
  explicit DeviceBuf(size_t bytes) { PG_CUDA_CHECK(cudaMalloc(&p, bytes)); }
  ~DeviceBuf() { cudaFree(p); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
};

// Milliseconds of one call of fn() on the legacy stream, by events (no warm-up: a first call
// times cold caches).
inline float EventMs(const std::function<void()>& fn) {
  cudaEvent_t a, b;
  PG_CUDA_CHECK(cudaEventCreate(&a));
  PG_CUDA_CHECK(cudaEventCreate(&b));
  PG_CUDA_CHECK(cudaEventRecord(a, 0));
  fn();
  PG_CUDA_CHECK(cudaEventRecord(b, 0));
  PG_CUDA_CHECK(cudaEventSynchronize(b));
  float t = 0;
  PG_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return t;
}

// Median milliseconds of `reps` timed calls of fn(i) on the legacy stream (after 3 warm-ups).
inline double MedianMs(int reps, const std::function<void(int)>& fn) {
  for (int i = 0; i < 3; ++i) fn(i);
  PG_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) ms.push_back(EventMs([&] { fn(i); }));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Per-call kernel time: `calls` calls fn(0..calls-1) captured in one graph on a non-default
// stream (the kernels' current stream), median of 10 replays, divided by `calls`.
inline double GraphMedianMs(const std::function<void(int)>& fn, int calls = 20) {
  cudaStream_t s;
  PG_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  double result = 0;
  {
    cuda::StreamScope scope(s);
    for (int i = 0; i < 3; ++i) fn(i);  // warm-up outside capture (scratch, cuBLASLt plans)
    PG_CUDA_CHECK(cudaStreamSynchronize(s));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    PG_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < calls; ++i) fn(i);
    PG_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    PG_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
    PG_CUDA_CHECK(cudaGraphLaunch(ge, s));
    PG_CUDA_CHECK(cudaStreamSynchronize(s));
    cudaEvent_t a, b;
    PG_CUDA_CHECK(cudaEventCreate(&a));
    PG_CUDA_CHECK(cudaEventCreate(&b));
    std::vector<float> ms;
    for (int r = 0; r < 10; ++r) {
      PG_CUDA_CHECK(cudaEventRecord(a, s));
      PG_CUDA_CHECK(cudaGraphLaunch(ge, s));
      PG_CUDA_CHECK(cudaEventRecord(b, s));
      PG_CUDA_CHECK(cudaEventSynchronize(b));
      float t = 0;
      PG_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
      ms.push_back(t / float(calls));
    }
    cudaEventDestroy(a), cudaEventDestroy(b);
    cudaGraphExecDestroy(ge), cudaGraphDestroy(g);
    std::sort(ms.begin(), ms.end());
    result = ms[ms.size() / 2];
  }
  cudaStreamDestroy(s);
  return result;
}

}  // namespace pg::bench
