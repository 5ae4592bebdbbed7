// mbarrier and 1-D bulk-copy (cp.async.bulk, "TMA without a tensor map") primitives of the
// producer / consumer shared-memory rings (sm_90): gemm/gemv_ring.cu (bf16 / f32-FMA fp8
// consumers), gemm/fp8_ring_mma.cu (tensor-core fp8 consumers) and attention/decode_stream.cu
// (the KV ring). A ring slot has a "full" barrier (count 1: the producer's arrive, plus the
// slot's bytes as transaction count) and an "empty" barrier (one arrive per consumer warp).
// Addresses are shared-memory (cvta) addresses; bytes are multiples of 16 with 16-byte aligned
// ends. Waits take the parity of the phase they wait for: use n of a slot (n = 0, 1, ...)
// waits for parity n & 1 of full, and the producer's (n + 1)-th fill waits for parity n & 1 of
// empty.
#pragma once

#include <cstdint>

#include "kernels/cuda/common/device_params.h"  // L2After

namespace pg::cuda::bulk {

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void MbarInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Makes the inits visible to the async proxy (the bulk copies' complete_tx).
__device__ __forceinline__ void FenceMbarInit() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void MbarArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void MbarArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
// One poll: whether `bar`'s phase of parity `parity` has completed (a fresh barrier counts as
// having completed the phase of parity 1); the thread may be suspended briefly meanwhile.
__device__ __forceinline__ bool MbarTryWait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
// Returns once that phase has completed; sleep_ns > 0 sleeps that long between polls (leaves
// the warp scheduler's issue slots to the other warps meanwhile).
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity, int sleep_ns = 0) {
  while (!MbarTryWait(bar, parity))
    if (sleep_ns > 0) __nanosleep(sleep_ns);
}
// A ring producer's first round paced to n slots in flight (lane 0, before arming slot `lin`
// of that round, lin < stages <= 32): waits for slot lin - n's full barrier (ring slots at
// full0 + 8 i, 8 bytes each) to pass its first phase, if that slot was armed (bit of `armed`;
// an unarmed slot's barrier would never pass). n <= 0: no wait. Later rounds are paced by the
// consumers' empty barriers. Fewer weight reads outstanding while the previous kernel's
// latency-bound steps run (fp8_ring_mma.cu, gemv_ring.cu).
__device__ __forceinline__ void PaceFirstFill(uint32_t full0, int lin, int n, int stages, uint32_t armed) {
  const int prior = lin - n;
  if (n > 0 && lin < stages && prior >= 0 && ((armed >> prior) & 1u)) MbarWait(full0 + 8 * prior, 0);
}
// The shared::cluster address of shared-memory address `addr` (SmemAddr) in the cluster's
// block of rank `rank`.
__device__ __forceinline__ uint32_t MapaCluster(uint32_t addr, int rank) {
  uint32_t out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(out) : "r"(addr), "r"(rank));
  return out;
}
// Stores into another block's shared memory of the cluster (remote: a MapaCluster address),
// counted on that block's barrier `remote_bar` (a MapaCluster address too) as transaction
// bytes: its waiters see the values once the barrier's phase completes. v2: 8-byte aligned.
__device__ __forceinline__ void StAsync(uint32_t remote, float v, uint32_t remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
               ::"r"(remote), "r"(__float_as_uint(v)), "r"(remote_bar) : "memory");
}
__device__ __forceinline__ void StAsync2(uint32_t remote, float v0, float v1, uint32_t remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];"
               ::"r"(remote), "r"(__float_as_uint(v0)), "r"(__float_as_uint(v1)), "r"(remote_bar)
               : "memory");
}
// bytes from global to shared, counted on `bar`'s transaction count, with an L2 policy.
__device__ __forceinline__ void BulkLoad(uint32_t dst, const void* src, uint32_t bytes,
                                         uint32_t bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}
// Asks the L2 for [src, src + bytes) (a hint: no completion to wait for, no data returned);
// src 16-byte aligned, bytes a multiple of 16.
__device__ __forceinline__ void BulkPrefetchL2(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}
// L2After: share i of A asks the L2 for the first h.pct % of slices [G i / A, G (i + 1) / A)
// (G = h.slices), in pieces of at most kL2Piece bytes. One thread; h.ptr non-null.
constexpr int64_t kL2Piece = 64 * 1024;
__device__ __forceinline__ void PrefetchL2Share(const L2After& h, int i, int A) {
  const int64_t G = h.slices, n16 = h.bytes / 16;  // 16-byte units
  for (int64_t j = G * i / A; j < G * (i + 1) / A; ++j) {
    const int64_t lo = n16 * j / G, hi = n16 * (j + 1) / G;
    const int64_t end = (lo + (hi - lo) * h.pct / 100) * 16;
    for (int64_t b = lo * 16; b < end; b += kL2Piece)
      BulkPrefetchL2(h.ptr + b, uint32_t(min(kL2Piece, end - b)));
  }
}
// L2 policy for data read once per launch (weights, KV pages): evict first.
__device__ __forceinline__ uint64_t EvictFirstPolicy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
// A position in a ring of `stages` slots: for a running slot number s, slot = s % stages and
// phase = (s / stages) & 1 (the parity that use n = s / stages of the slot waits for), kept
// without division as s advances (a 64-bit division a slot cost the rings their pace:
// docs/PERF.md "Session 14"). Advance(step) adds step <= stages to s.
struct RingCursor {
  int slot = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void Advance(int step, int stages) {
    slot += step;
    if (slot >= stages) slot -= stages, phase ^= 1u;
  }
};
// Barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a multiple of 32).
template <int kThreads>
__device__ __forceinline__ void NamedBarrier(int id) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "n"(kThreads) : "memory");
}

}  // namespace pg::cuda::bulk
