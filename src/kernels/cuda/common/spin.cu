#include "kernels/cuda/common/spin.h"

#include <cstdint>

namespace pg::cuda {
namespace {

__global__ void SpinKernel(uint64_t ns) {
  uint64_t start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    uint64_t now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start >= ns) break;
    __nanosleep(1000);
  }
}

}  // namespace

void LaunchSpin(double microseconds, cudaStream_t stream) {
  SpinKernel<<<1, 1, 0, stream>>>(uint64_t(microseconds * 1e3));
}

}  // namespace pg::cuda
