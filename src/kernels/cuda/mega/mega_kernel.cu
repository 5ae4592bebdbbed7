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
#include "kernels/cuda/gemm/gemv_device.cuh"
#include "kernels/cuda/mega/mega_attention.cuh"
#include "kernels/cuda/mega/mega_params.h"
#include "kernels/cuda/mega/mega_sync.cuh"

namespace pg::cuda {
namespace {

using namespace mega;

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

// The norm weights of a consumer thread's first two 8-element chunks (i = tid, tid + 256),
// loaded before the step's wait: they depend on nothing, so their latency leaves the
// step's critical path (k <= 4096; larger k loads the rest in StageInput).
struct NormPre {
  float w[2][8];
};

__device__ __forceinline__ void PreloadNorm(const MegaStep& s, NormPre& p) {
  if (s.kind != MegaKind::kNormProject && s.kind != MegaKind::kNormSwiGlu) return;
  const int nv = s.k / 8;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int i = threadIdx.x + j * kConsumerThreads;
    if (i < nv) {
#pragma unroll
      for (int q = 0; q < 8; ++q) p.w[j][q] = LoadNormWeight(s.norm_weight, s.norm_type, i * 8 + q);
    }
  }
}

// Stages the step's input vector in `act` (k / 8 chunks), RMS-normalised for the norm kinds
// (StageNormalised's loop and rounding). x was written by other blocks of this launch: read
// through L2 (ld.cg), never the non-coherent path. Ends with a consumer barrier.
__device__ __forceinline__ void StageInput(const MegaStep& s, uint4* act, float* red,
                                           const NormPre& pre) {
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
    ss += gemv::SumSq8(v);
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (lane == 0) red[warp] = ss;
  ConsumerSync();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kMegaConsumerWarps; ++w) total += red[w];
  const float inv = InvRms(total, s.k, s.eps);
  for (int i = tid, j = 0; i < nv; i += kConsumerThreads, ++j) {
    uint4 v = act[i];
    bf16* e = reinterpret_cast<bf16*>(&v);
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const float w = j == 0   ? pre.w[0][q]
                      : j == 1 ? pre.w[1][q]
                               : LoadNormWeight(s.norm_weight, s.norm_type, i * 8 + q);
      e[q] = NormElement(ToF(e[q]), inv, w);
    }
    act[i] = v;
  }
  ConsumerSync();
}

__device__ __forceinline__ float LoadCgBf16(const bf16* p) {
  return __bfloat162float(
      __ushort_as_bfloat16(__ldcg(reinterpret_cast<const unsigned short*>(p))));
}

// Row mode: block b's row groups [g0, g1) of a step with `groups` groups.
__device__ __forceinline__ void GroupRange(int groups, int& g0, int& g1) {
  g0 = int(int64_t(blockIdx.x) * groups / gridDim.x);
  g1 = int(int64_t(blockIdx.x + 1) * groups / gridDim.x);
}

// Row mode: the rows of group g actually present (the last group may be short); swiglu: per half.
__device__ __forceinline__ int GroupRows(const MegaStep& s, int g) {
  const int per = s.kind == MegaKind::kNormSwiGlu ? s.stage_rows / 2 : s.stage_rows;
  return min(per, s.m - g * per);
}

__device__ void ProduceRows(const MegaStep& s, uint8_t* ring, uint64_t* full, uint64_t* empty,
                            uint32_t& stage, uint64_t policy) {
  int g0, g1;
  GroupRange(s.num_tiles, g0, g1);
  const bool sw = s.kind == MegaKind::kNormSwiGlu;
  const int per = sw ? s.stage_rows / 2 : s.stage_rows;
  const uint32_t row_bytes = uint32_t(s.k) * 2;
  for (int g = g0; g < g1; ++g, ++stage) {
    const int slot = int(stage % kMegaRowSlots);
    MbarWait(&empty[slot], ((stage / kMegaRowSlots) & 1) ^ 1);
    const int nr = GroupRows(s, g);
    uint8_t* dst = ring + size_t(slot) * kMegaRowSlotBytes;
    const bf16* src = s.w + int64_t(g) * per * s.k;
    MbarArriveExpectTx(&full[slot], uint32_t(nr) * row_bytes * (sw ? 2 : 1));
    BulkLoad(dst, src, uint32_t(nr) * row_bytes, &full[slot], policy);
    if (sw) BulkLoad(dst + size_t(per) * row_bytes, src + int64_t(s.m) * s.k, uint32_t(nr) * row_bytes,
                     &full[slot], policy);
  }
}

__device__ void Produce(const MegaArgs& a, uint8_t* ring, uint64_t* full, uint64_t* empty) {
  const uint64_t policy = EvictFirstPolicy();
  uint32_t stage = 0;
  for (int si = a.begin; si < a.end; ++si) {
    const MegaStep s = a.steps[si];
    if (a.trace) a.trace[(size_t(si) * gridDim.x + blockIdx.x) * 4] = GlobalTimerNs();
    if (s.kind == MegaKind::kAttention) PrefetchKv(a, s, a.kv_prefetch_keys);
    if (a.row_mode) {
      if (s.kind != MegaKind::kAttention) ProduceRows(s, ring, full, empty, stage, policy);
      continue;
    }
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

// Row mode consumers of one GEMV step (the input is staged in act).
__device__ void ConsumeRows(const MegaStep& s, const uint8_t* ring, const uint4* act,
                            uint64_t* full, uint64_t* empty, uint32_t& stage) {
  __shared__ float part[2][kMegaConsumerWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool sw = s.kind == MegaKind::kNormSwiGlu;
  const int R = s.stage_rows, per_row = kMegaConsumerWarps / R;  // warps per row
  const int rl = warp / per_row, piece = warp % per_row;
  const int pe = s.k / per_row;  // columns of a piece (multiple of 8)
  const int half = R / 2;
  int g0, g1;
  GroupRange(s.num_tiles, g0, g1);
  int par = 0;
  for (int g = g0; g < g1; ++g, ++stage, par ^= 1) {
    const int slot = int(stage % kMegaRowSlots);
    MbarWait(&full[slot], (stage / kMegaRowSlots) & 1);
    const int nr = GroupRows(s, g);
    const bool valid = (sw ? rl % half : rl) < nr;
    float acc = 0.0f;
    if (valid) {
      const uint4* w4 = reinterpret_cast<const uint4*>(ring + size_t(slot) * kMegaRowSlotBytes +
                                                       (size_t(rl) * s.k + size_t(piece) * pe) * 2);
      const uint4* x4 = act + piece * pe / 8;
      for (int v = lane; v < pe / 8; v += 32) gemv::Dot8(w4[v], x4[v], acc);
    }
    __syncwarp();
    if (lane == 0) MbarArrive(&empty[slot]);
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) part[par][warp] = acc;
    ConsumerSync();  // the group's partials; par keeps the next group's writes off them
    const int t = threadIdx.x;
    if (t < (sw ? half : R) && t < nr) {
      float y = 0.0f;
      for (int i = 0; i < per_row; ++i) y += part[par][t * per_row + i];
      if (sw) {
        float u = 0.0f;
        for (int i = 0; i < per_row; ++i) u += part[par][(t + half) * per_row + i];
        s.out[g * half + t] = SiluMul(ToF(ToB(y)), ToF(ToB(u)));
      } else {
        const int64_t row = int64_t(g) * R + t;
        if (s.kind == MegaKind::kAccumulate) s.out[row] = ToB(y + LoadCgBf16(s.out + row));
        else s.out[row] = ToB(s.bias ? y + s.bias[row] : y);
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
    NormPre pre;
    PreloadNorm(s, pre);
    if (si > a.begin) WaitCounter(&a.counters[si - 1], gridDim.x);
    uint64_t* trace = a.trace ? a.trace + (size_t(si) * gridDim.x + blockIdx.x) * 4 : nullptr;
    if (trace && threadIdx.x == 0) trace[1] = GlobalTimerNs();
    if (s.kind == MegaKind::kAttention) {
      if (a.attn_unroll == 16) AttentionStep<16>(a, s, act);
      else AttentionStep<8>(a, s, act);
    } else {
      StageInput(s, act, red, pre);
    }
    if (trace && threadIdx.x == 0) trace[2] = GlobalTimerNs();
    if (a.row_mode && s.kind != MegaKind::kAttention) ConsumeRows(s, ring, act, full, empty, stage);
    int parity = 0;
    for (int t = blockIdx.x; !a.row_mode && t < s.num_tiles; t += gridDim.x, parity ^= 1) {
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
            if (v * 8 < kc) gemv::Dot8(w4[v], x4[v], acc);
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
      if (trace) trace[3] = GlobalTimerNs();
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
  static const int blocks = mega::PersistentMaxBlocks(MegaKernel, kMegaThreads, kMegaSmemBytes);
  return blocks;
}

// cooperative: the launch guarantees co-residency (or fails); pdl: the producers may start
// streaming weights while the previous kernel on the stream drains (the consumers PdlWait).
cudaError_t LaunchMega(const MegaArgs& a, int blocks, bool cooperative, bool pdl,
                       cudaStream_t stream) {
  return mega::LaunchPersistent(MegaKernel, blocks, kMegaThreads, kMegaSmemBytes, cooperative,
                                pdl, stream, a);
}

}  // namespace pg::cuda
