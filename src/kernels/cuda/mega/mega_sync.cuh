// Synchronisation primitives of the persistent decode kernel (mega_kernel.cu): mbarriers and
// 1-D bulk copies of the weight ring, the consumers' named barrier, acquire loads of the
// step counters, and a hang guard (a wait past kHangNs traps: a bug, not a hung job).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common/context.h"  // MultiprocessorCount
#include "kernels/cuda/mega/mega_params.h"

namespace pg::cuda::mega {

constexpr uint64_t kHangNs = 4000000000ull;  // 4 s: far beyond any step of a decode
constexpr int kConsumerThreads = kMegaConsumerWarps * 32;

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void MbarInit(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(SmemAddr(bar)), "r"(count));
}

__device__ __forceinline__ void MbarArriveExpectTx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(
                   SmemAddr(bar)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void MbarArrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(SmemAddr(bar))
               : "memory");
}

__device__ __forceinline__ bool MbarTryWait(uint64_t* bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(ok)
      : "r"(SmemAddr(bar)), "r"(parity)
      : "memory");
  return ok != 0;
}

// Waits for the phase of `bar` with this parity to complete (traps after kHangNs).
__device__ __forceinline__ void MbarWait(uint64_t* bar, uint32_t parity) {
  if (MbarTryWait(bar, parity)) return;
  const uint64_t t0 = GlobalTimerNs();
  while (!MbarTryWait(bar, parity))
    if (GlobalTimerNs() - t0 > kHangNs) __trap();
}

// 1-D bulk copy global -> shared, completing `bytes` of transactions on `bar`; the weights
// are read once per step, so they are marked evict-first in L2.
__device__ __forceinline__ void BulkLoad(void* dst, const void* src, uint32_t bytes,
                                         uint64_t* bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;" ::"r"(SmemAddr(dst)),
      "l"(src), "r"(bytes), "r"(SmemAddr(bar)), "l"(policy)
      : "memory");
}

// Asks L2 for `bytes` (a multiple of 16, 16-byte aligned) at `src`; no completion to wait for.
__device__ __forceinline__ void BulkPrefetchL2(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}

__device__ __forceinline__ uint64_t EvictFirstPolicy() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

__device__ __forceinline__ uint32_t LoadAcquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// The consumers' barrier (named barrier 1; the producer warp never joins it).
__device__ __forceinline__ void ConsumerSync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumerThreads) : "memory");
}

// Spins until *counter >= target (one thread), then orders the consumers after it.
__device__ __forceinline__ void WaitCounter(const uint32_t* counter, uint32_t target) {
  if (threadIdx.x == 0) {
    if (LoadAcquire(counter) < target) {
      const uint64_t t0 = GlobalTimerNs();
      while (LoadAcquire(counter) < target)
        if (GlobalTimerNs() - t0 > kHangNs) __trap();
    }
    __threadfence();
  }
  ConsumerSync();
}

// Blocks of one persistent launch: one per SM when `kernel` fits one block of `threads`
// threads and `smem` dynamic shared memory per SM (opting in to that much), else 0.
template <typename Args>
inline int PersistentMaxBlocks(void (*kernel)(Args), int threads, int smem) {
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) !=
      cudaSuccess)
    return 0;
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, size_t(smem)) !=
      cudaSuccess)
    return 0;
  return per_sm >= 1 ? MultiprocessorCount() : 0;
}

// Launches one of the persistent kernels: `blocks` blocks of `threads` threads (at most the
// co-resident blocks; cooperative = the driver checks that and guarantees co-residency, which
// the step counters' spin-waits need), optionally with programmatic stream serialisation (PDL).
template <typename Args>
inline cudaError_t LaunchPersistent(void (*kernel)(Args), int blocks, int threads, size_t smem,
                                    bool cooperative, bool pdl, cudaStream_t stream,
                                    const Args& a) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(blocks));
  config.blockDim = dim3(unsigned(threads));
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr[2];
  int n = 0;
  if (cooperative) {
    attr[n].id = cudaLaunchAttributeCooperative;
    attr[n++].val.cooperative = 1;
  }
  if (pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  config.attrs = attr;
  config.numAttrs = unsigned(n);
  return cudaLaunchKernelEx(&config, kernel, a);
}

}  // namespace pg::cuda::mega
