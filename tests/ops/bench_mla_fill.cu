// Device-side fp8 e4m3 fill for bench_mla: bytes from a per-element hash with the exponent
// kept below 1111 (never NaN), random sign.
#include <cstdint>

namespace pg::bench {
namespace {
__global__ void FillFp8Kernel(uint8_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    p[i] = uint8_t((h & 0xB7u) | 0x20u);  // exponent 01x0..10x1: magnitudes ~2^-6 .. 2^3
  }
}
}  // namespace

void FillFp8(void* p, int64_t n, uint32_t seed) {
  FillFp8Kernel<<<1024, 256>>>(static_cast<uint8_t*>(p), n, seed);
}
}  // namespace pg::bench
