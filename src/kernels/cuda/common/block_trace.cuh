// Block timeline trace (diagnostic build only: -DPEREGRINE_BLOCK_TRACE=ON). Every kernel that
// opens PG_BLOCK_TRACE(tag) at its top appends one record a block: when the block started,
// when its PDL wait began and returned, when its last thread left, on which SM, of which
// launch (%gridid). tools/gpu/block_timeline.py turns a replay's records into per-kernel
// start / wait / end spreads and the gaps between consecutive kernels.
// Without the option PG_BLOCK_TRACE(tag) and the PdlWait hooks compile to nothing.
#pragma once

#include <cstdint>

#include "kernels/cuda/common/block_trace.h"

#if defined(PEREGRINE_BLOCK_TRACE)

namespace pg::cuda::trace {

// Per translation unit (no relocatable device code): block_trace.cu's BlockTraceStart sets
// every unit's copy through the setter this header registers.
static __device__ BlockTraceBuffer* g_buffer = nullptr;

__device__ __forceinline__ uint64_t Now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

struct BlockShared {
  uint64_t start, wait0, wait1, clk_start;
  uint64_t mark[kBlockTraceMarks];
  unsigned exited;
};

// One instance a kernel (a function-scope __shared__ is static).
__device__ __forceinline__ BlockShared& Shared() {
  __shared__ BlockShared s;
  return s;
}

__device__ __forceinline__ bool FirstThread() {
  return threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
}

struct Scope {
  int tag;
  __device__ explicit Scope(int t) : tag(t) {
    if (FirstThread()) {
      BlockShared& s = Shared();
      s.start = Now();
      s.clk_start = clock64();
      s.wait0 = s.wait1 = 0;
      for (int i = 0; i < kBlockTraceMarks; ++i) s.mark[i] = 0;
      s.exited = 0;
    }
    __syncthreads();  // every thread is past the initialisation before any can leave
  }
  __device__ ~Scope() {
    BlockShared& s = Shared();
    const unsigned n = blockDim.x * blockDim.y * blockDim.z;
    if (atomicAdd(&s.exited, 1u) + 1 != n) return;  // the block's last thread records
    // The end, before the record's global atomic (a round trip that put every end stamp ~0.9
    // us after the block's work on the H200, docs/PERF.md "Session 19").
    const uint64_t end = Now();
    const uint64_t clk_end = clock64();
    BlockTraceBuffer* b = g_buffer;
    if (b == nullptr) return;
    const unsigned i = atomicAdd(&b->count, 1u);
    if (i >= b->capacity) return;
    BlockTraceRecord& r = b->records[i];
    uint64_t grid_id;
    uint32_t sm;
    asm volatile("mov.u64 %0, %%gridid;" : "=l"(grid_id));
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    r.grid_id = grid_id;
    r.start = s.start;
    r.wait0 = s.wait0;
    r.wait1 = s.wait1;
    for (int i = 0; i < kBlockTraceMarks; ++i) r.mark[i] = s.mark[i];
    r.end = end;
    r.clk_start = s.clk_start;
    r.clk_end = clk_end;
    r.block = blockIdx.x + gridDim.x * (blockIdx.y + uint64_t(gridDim.y) * blockIdx.z);
    r.blocks = uint32_t(gridDim.x) * gridDim.y * gridDim.z;
    r.tag = uint16_t(tag);
    r.sm = uint16_t(sm);
    r.threads = n;
  }
};

__device__ __forceinline__ void WaitBegin() {
  if (FirstThread()) Shared().wait0 = Now();
}
__device__ __forceinline__ void WaitEnd() {
  if (FirstThread()) Shared().wait1 = Now();
}
// Mark i (< kBlockTraceMarks): when the block's first thread passed a kernel's named point.
__device__ __forceinline__ void Mark(int i) {
  if (FirstThread()) Shared().mark[i] = Now();
}

// Registers this unit's buffer setter with the host side once.
namespace {
void SetThisUnit(BlockTraceBuffer* p) { cudaMemcpyToSymbol(g_buffer, &p, sizeof p); }
[[maybe_unused]] const bool kRegistered = (RegisterBlockTraceUnit(&SetThisUnit), true);
}  // namespace

}  // namespace pg::cuda::trace

#define PG_BLOCK_TRACE(tag) ::pg::cuda::trace::Scope pg_block_trace_scope_(tag)
#define PG_TRACE_WAIT_BEGIN() ::pg::cuda::trace::WaitBegin()
#define PG_TRACE_WAIT_END() ::pg::cuda::trace::WaitEnd()
#define PG_TRACE_MARK(i) ::pg::cuda::trace::Mark(i)

#else

#define PG_BLOCK_TRACE(tag) ((void)0)
#define PG_TRACE_WAIT_BEGIN() ((void)0)
#define PG_TRACE_WAIT_END() ((void)0)
#define PG_TRACE_MARK(i) ((void)0)

#endif
