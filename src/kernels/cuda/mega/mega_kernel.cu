// The persistent batch-1 decode kernel (mega_params.h): one cooperative grid runs a program of
// GEMV steps (a Llama layer's qkv, o, gate_up and down projections, layer after layer) so that
// HBM never idles at an op boundary:
//  * warp 8 of each block (the producer) streams the block's weight tiles of EVERY step of the
//    launch through a shared-memory ring (kMegaStages stages of 16 KB, cp.async.bulk + one
//    "full" and one "empty" mbarrier per stage). Weights depend on nothing, so while the
//    consumers wait for the previous step the ring already fills with the next step's tiles;
//  * warps 0-7 (the consumers) wait for the previous step (its counter reaching the grid size),
//    stage the step's input vector in shared memory (RMS-normalised for the norm kinds), then
//    warp w dots tile row w with it chunk by chunk, writes the outputs, and the block signals
//    the step's counter.
// Summation order and rounding points are those of gemv.cu's warp kernel: a lane sums the
// 16-byte chunks lane, lane + 32, ... of a row in order and the warp reduces with the xor
// butterfly; the staged norm is StageNormalised's (256 threads, same loop): the outputs are
// bitwise those of FusedMatmul / Matmul(accumulate) at batch 1.
//
// Deadlock safety: the grid is at most one block per SM and is launched cooperatively (the
// launch fails rather than run blocks that are not co-resident); a block only waits on
// counters of earlier steps, which every block reaches without waiting on a later one. A wait
// that lasts longer than kHangNs traps (a bug, not a hang of the whole job).
#include <cuda_bf16.h>

#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/elementwise/row_device.cuh"
#include "kernels/cuda/mega/mega_attention.cuh"
#include "kernels/cuda/mega/mega_params.h"
#include "kernels/cuda/mega/mega_sync.cuh"

namespace pg::cuda {
namespace {

using namespace mega;

// acc += dot(8 bf16 weights, 8 bf16 activations), in element order (as gemv.cu).
__device__ __forceinline__ void Dot8(const uint4& wv, const uint4& xv, float& acc) {
  const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&wv);
  const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&xv);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float2 wf = __bfloat1622float2(w2[q]);
    const float2 xf = __bfloat1622float2(x2[q]);
    acc = fmaf(wf.x, xf.x, acc);
    acc = fmaf(wf.y, xf.y, acc);
  }
}

__device__ __forceinline__ float SumSq8(const uint4& v) {
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
  float s = 0.0f;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float2 f = __bfloat1622float2(p[q]);
    s = fmaf(f.x, f.x, s);
    s = fmaf(f.y, f.y, s);
  }
  return s;
}

// Weight row of tile t's row r (r < kMegaTileRows), or -1 past the matrix. Swiglu tiles hold
// gate rows j0..j0+3 in rows 0-3 and the matching up rows m + j0.. in rows 4-7.
__device__ __forceinline__ int64_t TileRow(const MegaStep& s, int t, int r) {
  if (s.kind == MegaKind::kNormSwiGlu) {
    constexpr int kHalf = kMegaTileRows / 2;
    const int64_t j = int64_t(t) * kHalf + (r % kHalf);
    return j >= s.m ? -1 : (r < kHalf ? j : s.m + j);
  }
  const int64_t j = int64_t(t) * kMegaTileRows + r;
  return j < s.m ? j : -1;
}

// Stages the step's input vector in `act` (k / 8 chunks), RMS-normalised for the norm kinds
// (StageNormalised's loop and rounding). x was written by other blocks of this launch: read
// through L2 (ld.cg), never the non-coherent path. Ends with a consumer barrier.
__device__ __forceinline__ void StageInput(const MegaStep& s, uint4* act, float* red) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int nv = s.k / 8;
  const uint4* x4 = reinterpret_cast<const uint4*>(s.x);
  if (s.kind == MegaKind::kAccumulate) {
    for (int i = tid; i < nv; i += kConsumerThreads) act[i] = __ldcg(x4 + i);
    ConsumerSync();
    return;
  }
  float ss = 0.0f;
  for (int i = tid; i < nv; i += kConsumerThreads) {
    const uint4 v = __ldcg(x4 + i);
    act[i] = v;
    ss += SumSq8(v);
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (lane == 0) red[warp] = ss;
  ConsumerSync();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kMegaConsumerWarps; ++w) total += red[w];
  const float inv = InvRms(total, s.k, s.eps);
  for (int i = tid; i < nv; i += kConsumerThreads) {
    uint4 v = act[i];
    bf16* e = reinterpret_cast<bf16*>(&v);
#pragma unroll
    for (int q = 0; q < 8; ++q)
      e[q] = NormElement(ToF(e[q]), inv, LoadNormWeight(s.norm_weight, s.norm_type, i * 8 + q));
    act[i] = v;
  }
  ConsumerSync();
}

__device__ __forceinline__ float LoadCgBf16(const bf16* p) {
  return __bfloat162float(
      __ushort_as_bfloat16(__ldcg(reinterpret_cast<const unsigned short*>(p))));
}

__device__ void Produce(const MegaArgs& a, uint8_t* ring, uint64_t* full, uint64_t* empty) {
  const uint64_t policy = EvictFirstPolicy();
  uint32_t stage = 0;
  for (int si = a.begin; si < a.end; ++si) {
    const MegaStep s = a.steps[si];
    if (s.kind == MegaKind::kAttention) PrefetchKv(a, s, a.kv_prefetch_keys);
    for (int t = blockIdx.x; t < s.num_tiles; t += gridDim.x) {
      int64_t rows[kMegaTileRows];
      int valid = 0;
#pragma unroll
      for (int r = 0; r < kMegaTileRows; ++r) valid += (rows[r] = TileRow(s, t, r)) >= 0;
      for (int k0 = 0; k0 < s.k; k0 += kMegaChunk, ++stage) {
        const int slot = int(stage % kMegaStages);
        MbarWait(&empty[slot], ((stage / kMegaStages) & 1) ^ 1);
        const int kc = min(kMegaChunk, s.k - k0);
        MbarArriveExpectTx(&full[slot], uint32_t(valid * kc * 2));
        uint8_t* dst = ring + size_t(slot) * kMegaStageBytes;
#pragma unroll
        for (int r = 0; r < kMegaTileRows; ++r)
          if (rows[r] >= 0)
            BulkLoad(dst + r * kMegaChunk * 2, s.w + rows[r] * s.ldw + k0, uint32_t(kc * 2),
                     &full[slot], policy);
      }
    }
  }
}

__device__ void Consume(const MegaArgs& a, const uint8_t* ring, uint4* act, uint64_t* full,
                        uint64_t* empty) {
  __shared__ float red[kMegaConsumerWarps];
  __shared__ float swiglu[2][kMegaTileRows];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint32_t stage = 0;
  for (int si = a.begin; si < a.end; ++si) {
    const MegaStep s = a.steps[si];
    if (si > a.begin) WaitCounter(&a.counters[si - 1], gridDim.x);
    if (s.kind == MegaKind::kAttention) {
      if (a.attn_unroll == 8) AttentionStep<8>(a, s, act);
      else AttentionStep<4>(a, s, act);
    } else {
      StageInput(s, act, red);
    }
    int parity = 0;
    for (int t = blockIdx.x; t < s.num_tiles; t += gridDim.x, parity ^= 1) {
      const int64_t row = TileRow(s, t, warp);
      float acc = 0.0f;
      for (int k0 = 0; k0 < s.k; k0 += kMegaChunk, ++stage) {
        const int slot = int(stage % kMegaStages);
        MbarWait(&full[slot], (stage / kMegaStages) & 1);
        if (row >= 0) {
          const int kc = min(kMegaChunk, s.k - k0);
          const uint4* w4 = reinterpret_cast<const uint4*>(
              ring + size_t(slot) * kMegaStageBytes + warp * kMegaChunk * 2);
          const uint4* x4 = act + k0 / 8;
#pragma unroll
          for (int u = 0; u < kMegaChunk / 8 / 32; ++u) {
            const int v = lane + 32 * u;
            if (v * 8 < kc) Dot8(w4[v], x4[v], acc);
          }
        }
        __syncwarp();
        if (lane == 0) MbarArrive(&empty[slot]);
      }
      for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (s.kind == MegaKind::kNormSwiGlu) {
        if (lane == 0) swiglu[parity][warp] = ToF(ToB(acc));
        ConsumerSync();  // tile t's gate and up values; parity keeps tile t + 1 off them
        if (lane == 0 && warp < kMegaTileRows / 2 && row >= 0)
          s.out[row] = SiluMul(swiglu[parity][warp], swiglu[parity][warp + kMegaTileRows / 2]);
      } else if (lane == 0 && row >= 0) {
        if (s.kind == MegaKind::kAccumulate) {
          s.out[row] = ToB(acc + LoadCgBf16(s.out + row));
        } else {
          s.out[row] = ToB(s.bias ? acc + s.bias[row] : acc);
        }
      }
    }
    // Step si done in this block: publish its outputs (every consumer wrote before the barrier).
    ConsumerSync();
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(&a.counters[si], 1u);
    }
  }
  // The last block out (every other block is past its last wait) re-arms the counters.
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&a.counters[a.num_steps], 1u) == gridDim.x - 1) {
      for (int si = a.begin; si < a.end; ++si) a.counters[si] = 0;
      a.counters[a.num_steps] = 0;
      __threadfence();
    }
  }
}

static_assert(sizeof(AttnSmem) <= kMegaMaxK * 2, "attention partials fit the activation region");

__global__ void __launch_bounds__(kMegaThreads, 1) MegaKernel(const __grid_constant__ MegaArgs a) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t full[kMegaStages], empty[kMegaStages];
  uint8_t* ring = smem;                                                     // [stages][8][1024] bf16
  uint4* act = reinterpret_cast<uint4*>(smem + kMegaStages * kMegaStageBytes);  // [k / 8]
  if (threadIdx.x == 0) {
    for (int i = 0; i < kMegaStages; ++i) {
      MbarInit(&full[i], 1);
      MbarInit(&empty[i], kMegaConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  // Weights are constant: the producer may start before the previous kernel finishes. The
  // consumers read its outputs (and write), so they wait.
  if (threadIdx.x / 32 == kMegaConsumerWarps) {
    if (threadIdx.x % 32 == 0) Produce(a, ring, full, empty);
    return;
  }
  PdlWait();
  Consume(a, ring, act, full, empty);
}

}  // namespace

// Blocks of one launch: one per SM, if the kernel fits one block per SM (else 0).
int MegaMaxBlocks() {
  static const int blocks = [] {
    if (cudaFuncSetAttribute(MegaKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kMegaSmemBytes) != cudaSuccess)
      return 0;
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, MegaKernel, kMegaThreads,
                                                      kMegaSmemBytes) != cudaSuccess)
      return 0;
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    return per_sm >= 1 ? sms : 0;
  }();
  return blocks;
}

// cooperative: the launch guarantees co-residency (or fails); pdl: the producers may start
// streaming weights while the previous kernel on the stream drains (the consumers PdlWait).
cudaError_t LaunchMega(const MegaArgs& a, int blocks, bool cooperative, bool pdl,
                       cudaStream_t stream) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(blocks));
  config.blockDim = dim3(kMegaThreads);
  config.dynamicSmemBytes = kMegaSmemBytes;
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
  return cudaLaunchKernelEx(&config, MegaKernel, a);
}

}  // namespace pg::cuda
