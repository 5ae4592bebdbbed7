// Device fills for bench_moe: fp8 e4m3 weights from a per-element hash (finite values in
// about [-2, 2], never NaN), and f32 constants (scales).
#include <cstdint>

namespace pg::bench {
namespace {
__global__ void FillFp8Kernel(uint8_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed ^ uint32_t(i >> 32) * 40503u;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
    // sign | exponent 0..8 (bias 7: up to 2) | mantissa: never the NaN pattern S.1111.111.
    const uint32_t exp = (h >> 8) % 9u;
    p[i] = uint8_t((h & 0x80u) | (exp << 3) | (h & 7u));
  }
}
__global__ void FillF32Kernel(float* p, int64_t n, float v) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = v;
}
}  // namespace

void FillFp8(void* p, int64_t n, uint32_t seed) {
  FillFp8Kernel<<<1024, 256>>>(static_cast<uint8_t*>(p), n, seed);
}
void FillF32(void* p, int64_t n, float v) {
  FillF32Kernel<<<1024, 256>>>(static_cast<float*>(p), n, v);
}
}  // namespace pg::bench
