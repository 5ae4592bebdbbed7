// Warp mode of the persistent decode kernel (PEREGRINE_MEGA_WARP=1; GEMV steps only, attention
// runs in its own kernels between launches): the weights stream the way gemv.cu's warp kernel
// streams them — 32 warps a block, one block per SM, each warp its rows j = warp + t * (all
// warps) with 16-byte __ldcs register loads, the next group in flight while the current one is
// used — and at a step boundary each warp issues the NEXT step's first weight group into its
// registers BEFORE the block waits on the step counter, so the weights of step s + 1 are on
// their way while step s drains. Sums, rounding points and the staged norm are gemv.cu's
// (threads 0-255 stage as StageNormalised does), so outputs are bitwise the fused GEMV ops'.
// A swiglu step runs as a plain projection into `projected` (bf16 gate and up, rounded as the
// fused kernel rounds them) and the next step stages silu(gate) * up as its input
// (MegaStep::swiglu_in): SiluMul of the same bf16 values, bitwise the fused output.
// Counters and deadlock safety: as mega_kernel.cu (cooperative grid of one block per SM).
#include <cuda_bf16.h>

#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/elementwise/row_device.cuh"
#include "kernels/cuda/gemm/gemv_device.cuh"
#include "kernels/cuda/mega/mega_params.h"
#include "kernels/cuda/mega/mega_sync.cuh"

namespace pg::cuda {
namespace {

using namespace mega;

constexpr int kWarpThreads = 1024;
constexpr int kWarpsPerBlock = kWarpThreads / 32;
constexpr int kUnroll = 4;
constexpr int kStageThreads = 256;  // gemv.cu's block: the staged norm's summation order

// Chunks c0 + 32 u (16 bytes each) of a row of nv chunks; past the end: zero (never used).
__device__ __forceinline__ void LoadGroupW(const uint4* w4, int64_t c0, int64_t nv,
                                           uint4 (&buf)[kUnroll]) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t c = c0 + 32 * u;
    buf[u] = c < nv ? __ldcs(w4 + c) : make_uint4(0, 0, 0, 0);
  }
}

// Rows of w a step streams (a swiglu step runs as its 2m-row projection here).
__device__ __forceinline__ int64_t StepRows(const MegaStep& s) {
  return s.kind == MegaKind::kNormSwiGlu ? 2 * int64_t(s.m) : s.m;
}

__device__ __forceinline__ const uint4* RowPtr(const MegaStep& s, int64_t j) {
  return reinterpret_cast<const uint4*>(s.w + j * s.ldw);
}

// Stages the step's input in xs (gemv.cu's StageNormalised loop for the norm kinds; silu(gate)
// * up of swiglu_in; else a copy). Ends with __syncthreads.
__device__ void StageW(const MegaStep& s, uint4* xs, float* red) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int nv = s.k / 8;
  const uint4* x4 = reinterpret_cast<const uint4*>(s.x);
  if (s.kind == MegaKind::kAccumulate) {
    if (s.swiglu_in) {
      const bf16* g = s.swiglu_in;
      for (int i = tid; i < nv; i += kWarpThreads) {
        uint4 v;
        bf16* e = reinterpret_cast<bf16*>(&v);
        const uint4 gv = __ldcg(reinterpret_cast<const uint4*>(g) + i);
        const uint4 uv = __ldcg(reinterpret_cast<const uint4*>(g + s.k) + i);
        const bf16* ge = reinterpret_cast<const bf16*>(&gv);
        const bf16* ue = reinterpret_cast<const bf16*>(&uv);
#pragma unroll
        for (int q = 0; q < 8; ++q) e[q] = SiluMul(ToF(ge[q]), ToF(ue[q]));
        xs[i] = v;
      }
    } else {
      for (int i = tid; i < nv; i += kWarpThreads) xs[i] = __ldcg(x4 + i);
    }
    __syncthreads();
    return;
  }
  float ss = 0.0f;
  if (tid < kStageThreads) {
    for (int i = tid; i < nv; i += kStageThreads) {
      const uint4 v = __ldcg(x4 + i);
      xs[i] = v;
      ss += gemv::SumSq8(v);
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) red[warp] = ss;
  }
  __syncthreads();
  if (tid < kStageThreads) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kStageThreads / 32; ++w) total += red[w];
    const float inv = InvRms(total, s.k, s.eps);
    for (int i = tid; i < nv; i += kStageThreads) {
      uint4 v = xs[i];
      bf16* e = reinterpret_cast<bf16*>(&v);
#pragma unroll
      for (int q = 0; q < 8; ++q)
        e[q] = NormElement(ToF(e[q]), inv, LoadNormWeight(s.norm_weight, s.norm_type, i * 8 + q));
      xs[i] = v;
    }
  }
  __syncthreads();
}

__device__ __forceinline__ float LoadCgBf16W(const bf16* p) {
  return __bfloat162float(
      __ushort_as_bfloat16(__ldcg(reinterpret_cast<const unsigned short*>(p))));
}

__global__ void __launch_bounds__(kWarpThreads, 1) MegaWarpKernel(const __grid_constant__ MegaArgs a) {
  extern __shared__ uint4 xs[];  // [k / 8] the step's staged input
  __shared__ float red[kStageThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t j0 = int64_t(blockIdx.x) * kWarpsPerBlock + warp;
  const int64_t jstride = int64_t(gridDim.x) * kWarpsPerBlock;
  uint4 buf[kUnroll];
  // The launch's first step: its first group, before anything waits (weights are constant).
  {
    const MegaStep& s = a.steps[a.begin];
    if (j0 < StepRows(s)) LoadGroupW(RowPtr(s, j0), lane, s.k / 8, buf);
  }
  PdlWait();
  for (int si = a.begin; si < a.end; ++si) {
    const MegaStep s = a.steps[si];
    const bool has_next = si + 1 < a.end;
    const MegaStep* next = has_next ? &a.steps[si + 1] : nullptr;
    if (si > a.begin) {
      if (threadIdx.x == 0) {
        const uint32_t* c = &a.counters[si - 1];
        if (LoadAcquire(c) < gridDim.x) {
          const uint64_t t0 = GlobalTimerNs();
          while (LoadAcquire(c) < gridDim.x)
            if (GlobalTimerNs() - t0 > kHangNs) __trap();
        }
        __threadfence();
      }
      __syncthreads();
    }
    StageW(s, xs, red);
    const int64_t rows = StepRows(s), nv = s.k / 8;
    const bool proj = s.kind == MegaKind::kNormSwiGlu;  // into s.out as [2m] bf16 projection
    for (int64_t j = j0; j < rows; j += jstride) {
      const int64_t jn = j + jstride;
      const uint4* w4 = RowPtr(s, j);
      float acc = 0.0f;
      for (int64_t c0 = lane; c0 < nv; c0 += 32 * kUnroll) {
        uint4 cur[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) cur[u] = buf[u];
        if (c0 + 32 * kUnroll < nv) {
          LoadGroupW(w4, c0 + 32 * kUnroll, nv, buf);
        } else if (jn < rows) {
          LoadGroupW(RowPtr(s, jn), lane, nv, buf);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t c = c0 + 32 * u;
          if (c >= nv) break;
          gemv::Dot8(cur[u], xs[c], acc);
        }
      }
      for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (lane == 0) {
        if (proj) {
          s.out[j] = ToB(acc);
        } else if (s.kind == MegaKind::kAccumulate) {
          s.out[j] = ToB(acc + LoadCgBf16W(s.out + j));
        } else {
          s.out[j] = ToB(s.bias ? acc + s.bias[j] : acc);
        }
      }
    }
    // The boundary prefetch: every lane (also lanes with no chunk in this step's rows, and
    // warps with no row) issues its first group of the next step before the wait.
    if (has_next && j0 < StepRows(*next)) LoadGroupW(RowPtr(*next, j0), lane, next->k / 8, buf);
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(&a.counters[si], 1u);
    }
  }
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&a.counters[a.num_steps], 1u) == gridDim.x - 1) {
      for (int si = a.begin; si < a.end; ++si) a.counters[si] = 0;
      a.counters[a.num_steps] = 0;
      __threadfence();
    }
  }
}

}  // namespace

// Blocks of a warp-mode launch: one per SM when the kernel fits one 1024-thread block per SM.
int MegaWarpMaxBlocks() {
  static const int blocks = mega::PersistentMaxBlocks(MegaWarpKernel, kWarpThreads, kMegaMaxK * 2);
  return blocks;
}

cudaError_t LaunchMegaWarp(const MegaArgs& a, int blocks, bool cooperative, bool pdl,
                           cudaStream_t stream) {
  return mega::LaunchPersistent(MegaWarpKernel, blocks, kWarpThreads, kMegaMaxK * 2,
                                cooperative, pdl, stream, a);
}

}  // namespace pg::cuda
