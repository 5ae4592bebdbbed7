// Device-side fill for bench_cuda: bf16 values from a per-element hash, uniform in
// [-scale, scale) (never zeros: zeros can run faster than real data).
#include <cuda_bf16.h>

#include <cstdint>

namespace pg::bench {
namespace {
__global__ void FillKernel(__nv_bfloat16* p, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed ^ uint32_t(i >> 32) * 40503u;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
    p[i] = __float2bfloat16_rn((float(h & 0xffffff) / 16777216.0f * 2.0f - 1.0f) * scale);
  }
}
}  // namespace

void FillBf16(void* p, int64_t n, uint32_t seed, float scale) {
  FillKernel<<<1024, 256>>>(static_cast<__nv_bfloat16*>(p), n, seed, scale);
}
}  // namespace pg::bench
