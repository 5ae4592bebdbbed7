// KV streaming probe (H200): the decode attention's memory access pattern without its math.
// A 32K-token bf16 cache of 8 kv heads x 128 dims (token-major pages of 16 tokens: a page's K
// is one contiguous 32 KB run, as KvCacheView lays it out), split over 128 blocks of 256 keys
// (the tensor-core decode kernel's 32K x 1 plan), read three ways:
//   A  per-warp cp.async rings (8 warps = 8 kv heads, 16-key tiles, 16-byte copies, S stages
//      of K + V = 8 KB each): decode_attention_mma.cu's layout;
//   B  a block ring of whole pages (cp.async.bulk, one producer thread, mbarriers), the 8
//      warps reading their head's rows out of each page: gemv_ring.cu's structure;
//   C  plain 16-byte loads into registers (ld.global.nc), the same split.
// Each consumer sums one word of every 16 bytes it owns, so every byte is read from smem /
// registers. Prints µs and GB/s (K + V bytes / time) per variant, best of 20 launches.
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a kv_stream.cu -o kv_stream
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#define CK(x) do { cudaError_t err_ = (x); if (err_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(err_)); return 1; } } while (0)

constexpr int kHeads = 8, kD = 128;
constexpr int kRow = kD * 2;                 // bytes of one (token, head) row
constexpr int kSlot = kHeads * kRow;         // bytes of one token (all heads) = 2 KB
__device__ uint32_t g_sink;

__device__ __forceinline__ void CpAsync16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(dst))), "l"(src) : "memory");
}

// A: warp w = head w; tile = 16 keys; per stage K (16 x 256 B) + V (16 x 256 B).
template <int S>
__global__ void __launch_bounds__(256, 1) PerWarpRing(const char* kc, const char* vc, int keys_per_block) {
  extern __shared__ uint4 smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint4* ring = smem + warp * S * 512;  // 512 uint4 = 8 KB a stage
  const int k0 = blockIdx.x * keys_per_block, tiles = keys_per_block / 16;
  auto issue = [&](int i) {
    uint4* st = ring + (i % S) * 512;
    for (int c = lane; c < 256; c += 32) {  // 16 keys x 16 vectors
      const int key = k0 + i * 16 + c / 16, v = c % 16;
      const int64_t off = int64_t(key) * kSlot + warp * kRow + v * 16;
      CpAsync16(st + c, kc + off);
      CpAsync16(st + 256 + c, vc + off);
    }
  };
  for (int i = 0; i < S - 1; ++i) { if (i < tiles) issue(i); asm volatile("cp.async.commit_group;"); }
  uint32_t s = 0;
  for (int i = 0; i < tiles; ++i) {
    __syncwarp();
    if (i + S - 1 < tiles) issue(i + S - 1);
    asm volatile("cp.async.commit_group;");
    asm volatile("cp.async.wait_group %0;" ::"n"(S - 1));
    __syncwarp();
    const uint4* st = ring + (i % S) * 512;
    for (int c = lane; c < 512; c += 32) s ^= st[c].x;
  }
  if (s == 0x12345678u) g_sink = s;
}

// B: block ring of NS page halves (K or V of one page: 32 KB), producer = warp 8 lane 0.
template <int NS, int kSlotBytes>
__global__ void __launch_bounds__(288, 1) BlockRing(const char* kc, const char* vc, int keys_per_block) {
  extern __shared__ __align__(128) unsigned char sm[];
  uint64_t* full = reinterpret_cast<uint64_t*>(sm);
  uint64_t* empty = full + NS;
  unsigned char* ring = sm + 1024;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k0 = blockIdx.x * keys_per_block;
  constexpr int kKeysPerSlot = kSlotBytes / kSlot;
  const int slots = 2 * keys_per_block / kKeysPerSlot;  // K and V alternate
  if (threadIdx.x == 0) {
    for (int i = 0; i < NS; ++i) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(full + i))));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 8;" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(empty + i))));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  auto wait = [](uint64_t* bar, uint32_t parity) {
    const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
    uint32_t done = 0;
    while (!done)
      asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                   : "=r"(done) : "r"(b), "r"(parity) : "memory");
  };
  if (warp == 8) {
    if (lane != 0) return;
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    for (int s = 0; s < slots; ++s) {
      const int slot = s % NS;
      wait(empty + slot, ((s / NS) & 1) ^ 1);
      const uint32_t fb = static_cast<uint32_t>(__cvta_generic_to_shared(full + slot));
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(fb), "r"(kSlotBytes) : "memory");
      const char* src = (s % 2 ? vc : kc) + int64_t(k0 + (s / 2) * kKeysPerSlot) * kSlot;
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
                   ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(ring + slot * kSlotBytes))), "l"(src),
                   "r"(kSlotBytes), "r"(fb), "l"(pol) : "memory");
    }
    return;
  }
  uint32_t x = 0;
  for (int s = 0; s < slots; ++s) {
    const int slot = s % NS;
    wait(full + slot, (s / NS) & 1);
    const uint4* p = reinterpret_cast<const uint4*>(ring + slot * kSlotBytes);
    for (int c = lane; c < kKeysPerSlot * 16; c += 32) {  // (token, vector) of this warp's head
      const int tok = c / 16, v = c % 16;
      x ^= p[(tok * kSlot + warp * kRow) / 16 + v].x;
    }
    __syncwarp();
    if (lane == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(empty + slot))) : "memory");
  }
  if (x == 0x12345678u) g_sink = x;
}

// C: 256 threads, each 16-byte loads, U in flight.
template <int U>
__global__ void __launch_bounds__(256) Plain(const uint4* kc, const uint4* vc, int keys_per_block) {
  const int64_t base = int64_t(blockIdx.x) * keys_per_block * kSlot / 16;
  const int64_t n = int64_t(keys_per_block) * kSlot / 16;
  uint32_t s = 0;
  for (int64_t i = threadIdx.x; i < n; i += 256 * U) {
    uint4 a[U], b[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t j = i + u * 256;
      a[u] = j < n ? __ldcs(kc + base + j) : make_uint4(0, 0, 0, 0);
      b[u] = j < n ? __ldcs(vc + base + j) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) s ^= a[u].x ^ b[u].x;
  }
  if (s == 0x12345678u) g_sink = s;
}

int main() {
  const int keys = 32768, blocks = 128, kpb = keys / blocks;
  const int64_t bytes = int64_t(keys) * kSlot;  // per K (and V)
  char *kc, *vc, *flush;
  CK(cudaMalloc(&kc, bytes));
  CK(cudaMalloc(&vc, bytes));
  CK(cudaMalloc(&flush, 256 << 20));
  CK(cudaMemset(kc, 1, bytes));
  CK(cudaMemset(vc, 2, bytes));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  auto timeit = [&](const char* name, auto launch) {
    float best = 1e9f;
    for (int r = 0; r < 20; ++r) {
      cudaMemsetAsync(flush, r, 256 << 20);  // evicts the cache between launches
      cudaEventRecord(e0);
      launch();
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms;
      cudaEventElapsedTime(&ms, e0, e1);
      best = std::min(best, ms);
    }
    const cudaError_t err = cudaGetLastError();
    printf("%-44s %8.2f us  %6.0f GB/s  %s\n", name, best * 1e3, 2.0 * bytes / (best * 1e-3) / 1e9,
           err == cudaSuccess ? "" : cudaGetErrorString(err));
  };
  auto setsmem = [](const void* k, int b) { cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, b); };
  setsmem(reinterpret_cast<const void*>(PerWarpRing<3>), 8 * 3 * 8192);
  setsmem(reinterpret_cast<const void*>(BlockRing<6, 32768>), 1024 + 6 * 32768);
  setsmem(reinterpret_cast<const void*>(BlockRing<12, 16384>), 1024 + 12 * 16384);
  setsmem(reinterpret_cast<const void*>(BlockRing<24, 8192>), 1024 + 24 * 8192);
  setsmem(reinterpret_cast<const void*>(BlockRing<4, 32768>), 1024 + 4 * 32768);
  printf("K + V of 32K tokens x 8 heads x 128 dims bf16 = %.1f MB, %d blocks of %d keys\n", 2.0 * bytes / 1e6, blocks, kpb);
  for (int rep = 0; rep < 2; ++rep) {
    timeit("A per-warp cp.async ring, 3 x 8 KB a warp", [&] { PerWarpRing<3><<<blocks, 256, 8 * 3 * 8192>>>(kc, vc, kpb); });
    timeit("B block bulk ring, 6 x 32 KB", [&] { BlockRing<6, 32768><<<blocks, 288, 1024 + 6 * 32768>>>(kc, vc, kpb); });
    timeit("B block bulk ring, 4 x 32 KB", [&] { BlockRing<4, 32768><<<blocks, 288, 1024 + 4 * 32768>>>(kc, vc, kpb); });
    timeit("B block bulk ring, 12 x 16 KB", [&] { BlockRing<12, 16384><<<blocks, 288, 1024 + 12 * 16384>>>(kc, vc, kpb); });
    timeit("B block bulk ring, 24 x 8 KB", [&] { BlockRing<24, 8192><<<blocks, 288, 1024 + 24 * 8192>>>(kc, vc, kpb); });
    timeit("C plain loads, 4 x 2 in flight a thread", [&] { Plain<4><<<blocks, 256>>>(reinterpret_cast<const uint4*>(kc), reinterpret_cast<const uint4*>(vc), kpb); });
    timeit("C plain loads, 8 x 2 in flight a thread", [&] { Plain<8><<<blocks, 256>>>(reinterpret_cast<const uint4*>(kc), reinterpret_cast<const uint4*>(vc), kpb); });
    timeit("C plain loads 8x2, 4 blocks an SM (512)", [&] { Plain<8><<<512, 256>>>(reinterpret_cast<const uint4*>(kc), reinterpret_cast<const uint4*>(vc), kpb / 4); });
  }
  return 0;
}
