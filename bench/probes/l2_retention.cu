// L2 retention probe (H200): does data one kernel brings into L2 (loads, bulk prefetch) stay
// there for the next kernel, for plain loads and for bulk copies (cp.async.bulk, as
// gemv_ring.cu's producer) with and without an evict-first policy?
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a l2_retention.cu -o l2_retention
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <vector>

#define CK(x) do { cudaError_t err_ = (x); if (err_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(err_)); return 1; } } while (0)

__device__ uint32_t g_sink;

// Every thread reads 16-byte vectors grid-strided; kind 0: ld.global.nc, 1: ld.global.cs,
// 2: bulk prefetch of 64 KB pieces (thread-strided pieces).
__global__ void Load(const uint4* p, int64_t n16, int kind) {
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, nt = int64_t(gridDim.x) * blockDim.x;
  uint32_t s = 0;
  if (kind == 2) {
    const int64_t pieces = n16 * 16 / 65536;
    if (threadIdx.x >= 32) return;  // one warp a block: pieces dealt over (block, lane)
    for (int64_t i = int64_t(blockIdx.x) * 32 + threadIdx.x; i < pieces; i += int64_t(gridDim.x) * 32)
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], 65536;" ::"l"(p + i * 4096) : "memory");
    return;
  }
  for (int64_t i = tid; i < n16; i += nt) {
    const uint4 v = kind == 0 ? __ldg(p + i) : __ldcs(p + i);
    s ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (s == 0x12345678u) g_sink = s;
}

// One block per SM, one thread copies 16 KB pieces into a 2-slot shared ring with
// cp.async.bulk + mbarrier (policy: 0 none, 1 evict_first), waits each, sums one word.
__global__ void Bulk(const char* p, int64_t bytes, int policy_kind) {
  __shared__ __align__(128) char buf[2][16384];
  __shared__ __align__(8) uint64_t bar[2];
  if (threadIdx.x != 0) return;
  const uint32_t b0 = static_cast<uint32_t>(__cvta_generic_to_shared(&bar[0]));
  for (int i = 0; i < 2; ++i)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b0 + 8 * i));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  const int64_t pieces = bytes / 16384;
  uint32_t s = 0, phase[2] = {0, 0};
  int k = 0;
  for (int64_t i = blockIdx.x; i < pieces; i += gridDim.x, k ^= 1) {
    const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(buf[k]));
    const uint32_t bar_k = b0 + 8 * k;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 16384;" ::"r"(bar_k) : "memory");
    if (policy_kind == 1)
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], 16384, [%2], %3;"
                   ::"r"(dst), "l"(p + i * 16384), "r"(bar_k), "l"(pol) : "memory");
    else
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 16384, [%2];"
                   ::"r"(dst), "l"(p + i * 16384), "r"(bar_k) : "memory");
    uint32_t done = 0;
    while (!done)
      asm volatile("{\n .reg .pred q;\n mbarrier.try_wait.parity.shared::cta.b64 q, [%1], %2;\n selp.u32 %0, 1, 0, q;\n}\n"
                   : "=r"(done) : "r"(bar_k), "r"(phase[k]) : "memory");
    phase[k] ^= 1;
    s ^= *reinterpret_cast<volatile uint32_t*>(buf[k]);
  }
  if (s == 0x12345678u) g_sink = s;
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  int l2 = 0;
  cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0);
  printf("SMs %d, L2 %d MB\n", sms, l2 >> 20);
  const int64_t flush_bytes = int64_t(512) << 20, max_bytes = int64_t(48) << 20;
  char *flush, *a, *b;
  CK(cudaMalloc(&flush, flush_bytes));
  CK(cudaMalloc(&a, max_bytes));
  CK(cudaMalloc(&b, max_bytes));
  CK(cudaMemset(b, 3, max_bytes));
  CK(cudaMemset(flush, 1, flush_bytes));
  CK(cudaMemset(a, 2, max_bytes));
  cudaEvent_t e[3];
  for (auto& x : e) cudaEventCreate(&x);
  // step kinds: 0 nc load, 1 cs load, 2 bulk prefetch, 3 bulk copy, 4 bulk copy evict_first
  auto launch = [&](int kind, int64_t bytes, char* buf) {
    if (kind <= 2) Load<<<sms * 4, 256>>>(reinterpret_cast<const uint4*>(buf), bytes / 16, kind);
    else Bulk<<<sms, 32>>>(buf, bytes, kind - 3);
  };
  const char* names[] = {"ld.nc", "ld.cs", "bulk-prefetch", "bulk", "bulk+evict_first"};
  for (int64_t mb : {16, 32, 40}) {
    const int64_t bytes = mb << 20;
    for (int first : {-2, 0, 1, 2, 4}) {
      for (int second : {0, 3, 4}) {
        float best1 = 1e9f, best2 = 1e9f;
        for (int rep = 0; rep < 5; ++rep) {
          Load<<<sms * 4, 256>>>(reinterpret_cast<const uint4*>(flush), flush_bytes / 16, 0);
          cudaEventRecord(e[0]);
          if (first >= 0) launch(first, bytes, a);
          else launch(0, bytes, b);  // -2: another buffer first (the second read is cold)
          cudaEventRecord(e[1]);
          launch(second, bytes, a);
          cudaEventRecord(e[2]);
          CK(cudaEventSynchronize(e[2]));
          float t1, t2;
          cudaEventElapsedTime(&t1, e[0], e[1]);
          cudaEventElapsedTime(&t2, e[1], e[2]);
          best1 = std::min(best1, t1), best2 = std::min(best2, t2);
        }
        printf("%2lld MB  first %-16s %7.1f us  then %-16s %7.1f us (%6.0f GB/s)\n", (long long)mb,
               first < 0 ? "other buffer" : names[first], best1 * 1e3f, names[second],
               best2 * 1e3f, bytes / (best2 * 1e-3) / 1e9);
      }
    }
  }
  CK(cudaGetLastError());
  return 0;
}
