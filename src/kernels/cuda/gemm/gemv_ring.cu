// Ring decode GEMV: out[r, j] = sum_i x[r, i] * w[j, i] for 1-4 rows r (GemvArgs, with the
// fused options of gemv.cu: RMSNorm prologue, SwiGLU epilogue, bias, accumulate, f32 out).
//
// One block per SM: a producer warp streams the block's weight rows into a shared-memory ring
// with 1-D bulk copies (cp.async.bulk, completion counted in bytes on the slot's "full"
// mbarrier), kConsumerWarps consumer warps take the slots in order and give each back on its
// "empty" mbarrier. The bytes in flight are the ring (64-96 KB a block), not a function of
// the warp count, so the block is small (288 threads, <= ~110 KB of shared memory) and the
// next kernel's block fits beside it. PDL (common/pdl.cuh): the kernel triggers its
// dependents at once and the producer fills the ring before PdlWait (w_constant: weights are
// never written in a step), so while the previous kernel drains, this one's first ~10 MB are
// already on their way; the consumers PdlWait, stage x (normalised when asked), then consume.
//
// Work split: the warp-row space (m rows; ceil(m / 2) with two rows per warp, kPair; m gate
// rows with swiglu, whose warps also stream up row m + j) is cut into gridDim.x contiguous
// slices; a block walks its slice in groups of kConsumerWarps warp-rows (warp w owns row
// j = group start + w) and each group's rows in chunks of `chunk` columns: one ring slot =
// one (group, chunk) = kConsumerWarps * kW row pieces of chunk * 2 bytes.
// Summation order: a lane sums chunks lane, lane + 32, ... of its row in order across the
// slots (chunk is a multiple of 256 columns), so the outputs are bitwise those of gemv.cu.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "core/env.h"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/gemm/gemv_device.cuh"
#include "kernels/cuda/gemm/gemv_ring.h"

namespace pg::cuda {
namespace {

constexpr int kConsumerWarps = 8;
constexpr int kThreads = (kConsumerWarps + 1) * 32;  // + the producer warp (the last one)
constexpr int kMaxRows = 4;
constexpr int kMaxStages = 8;
constexpr int kBarBytes = 2 * kMaxStages * 8;        // full[kMaxStages], empty[kMaxStages]
constexpr int kMaxStageX = 32 * 1024;                // staged x rows (n * k * 2 bytes)
constexpr int kSmemBudget = 110 * 1024;              // ring + x + barriers: two blocks an SM

// Launch geometry, fixed per call on the host.
struct RingPlan {
  int stages;       // ring slots (2 .. kMaxStages)
  int chunk;        // columns per slot row piece (multiple of 256; the last piece may be shorter)
  int slot_bytes;   // kConsumerWarps * kW * chunk * 2
  int x_offset;     // byte offset of the staged x rows (stage_x)
  bool stage_x;     // x rows in shared memory (always with the norm); else read from global
};

// ---- mbarrier / bulk-copy primitives (sm_90) ------------------------------------------------
__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void MbarInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void MbarArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void MbarArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Returns once the barrier's phase of parity `parity` has completed.
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
// bytes (multiple of 16, 16-byte aligned ends) from global to shared, counted on `bar`;
// weights are read once: L2 evict-first.
__device__ __forceinline__ void BulkLoad(uint32_t dst, const void* src, uint32_t bytes,
                                         uint32_t bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}
__device__ __forceinline__ uint64_t EvictFirstPolicy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ void ConsumerBarrier() {  // the consumer warps only (named barrier 1)
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumerWarps * 32) : "memory");
}

template <int NB, bool kNorm, bool kSwiGlu, bool kPair>
__global__ void __launch_bounds__(kThreads, 2) GemvRingKernel(GemvArgs a, RingPlan p) {
  constexpr int kW = kSwiGlu || kPair ? 2 : 1;  // weight rows per warp: j (and j + roff)
  extern __shared__ __align__(128) unsigned char smem[];
  PdlTrigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t mj = kPair ? (a.m + 1) / 2 : a.m;  // the warp-row space
  const int64_t roff = kSwiGlu ? a.m : mj;         // offset of a warp's second row
  const int64_t jb = mj * blockIdx.x / gridDim.x, je = mj * (blockIdx.x + 1) / gridDim.x;
  const int64_t groups = (je - jb + kConsumerWarps - 1) / kConsumerWarps;
  const int64_t chunks = (a.k + p.chunk - 1) / p.chunk;
  const int64_t slots = groups * chunks;  // ring slots this block streams, in order
  const uint32_t full0 = SmemAddr(smem), empty0 = full0 + kMaxStages * 8;
  const uint32_t ring0 = SmemAddr(smem + kBarBytes);

  if (threadIdx.x == 0) {
    for (int s = 0; s < p.stages; ++s) {
      MbarInit(full0 + 8 * s, 1);                 // the producer's arrive (+ the bytes)
      MbarInit(empty0 + 8 * s, kConsumerWarps);   // one arrive per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (warp == kConsumerWarps) {  // ---- producer ----------------------------------------------
    if (!a.w_constant) PdlWait();
    const uint64_t policy = EvictFirstPolicy();
    // Lane t < kConsumerWarps * kW copies slot row t: warp-row w = t / kW, its row q = t % kW.
    const int w = lane / kW, q = lane % kW;
    for (int64_t s = 0; s < slots; ++s) {
      const int slot = int(s % p.stages);
      const uint32_t round = uint32_t(s / p.stages) & 1;
      const int64_t g = s / chunks, k0 = (s % chunks) * p.chunk;
      const uint32_t piece = uint32_t(a.k - k0 < p.chunk ? a.k - k0 : p.chunk) * 2;
      const int64_t j = jb + g * kConsumerWarps + w;
      const bool copies = lane < kConsumerWarps * kW && j < je;
      const uint32_t bytes = uint32_t(__popc(__ballot_sync(0xffffffffu, copies))) * piece;
      if (lane == 0) {
        MbarWait(empty0 + 8 * slot, round ^ 1);  // a fresh barrier passes parity 1 at once
        MbarArriveExpectTx(full0 + 8 * slot, bytes);
      }
      __syncwarp();
      if (copies) {
        // kPair with odd m: the last warp-row has no partner; it streams its own row twice.
        const int64_t r = kSwiGlu || q == 0 || j + q * roff < a.m ? j + q * roff : j;
        BulkLoad(ring0 + uint32_t(slot) * p.slot_bytes + uint32_t(lane) * uint32_t(p.chunk) * 2,
                 a.w + r * a.ldw + k0, piece, full0 + 8 * slot, policy);
      }
    }
    return;
  }

  // ---- consumers ---------------------------------------------------------------------------
  PdlWait();
  uint4* xs = reinterpret_cast<uint4*>(smem + p.x_offset);
  if (p.stage_x)
    gemv::StageRows<NB, kConsumerWarps>(a, 0, xs, threadIdx.x, kNorm, [] { ConsumerBarrier(); });
  const uint4* xv4 = p.stage_x ? xs : reinterpret_cast<const uint4*>(a.x);
  const int64_t xld = p.stage_x ? a.k / 8 : a.ldx / 8;  // row stride of xv4, 16-byte units
  const int piece_v = p.chunk / 8;                      // 16-byte units per row piece
  const uint4* ring = reinterpret_cast<const uint4*>(smem + kBarBytes);
  int64_t s = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t j = jb + g * kConsumerWarps + warp;
    const bool active = j < je;
    float acc[kW][NB];
#pragma unroll
    for (int q = 0; q < kW; ++q)
#pragma unroll
      for (int r = 0; r < NB; ++r) acc[q][r] = 0.0f;
    for (int64_t c = 0; c < chunks; ++c, ++s) {
      const int slot = int(s % p.stages);
      MbarWait(full0 + 8 * slot, uint32_t(s / p.stages) & 1);
      if (active) {
        const uint4* wr = ring + int64_t(slot) * (p.slot_bytes / 16) + warp * kW * piece_v;
        const int64_t x0 = c * piece_v;
        const int nv = int(a.k - x0 * 8 < p.chunk ? a.k - x0 * 8 : p.chunk) / 8;
#pragma unroll 4
        for (int i = lane; i < nv; i += 32) {
          uint4 wv[kW];
#pragma unroll
          for (int q = 0; q < kW; ++q) wv[q] = wr[q * piece_v + i];
#pragma unroll
          for (int r = 0; r < NB; ++r) {
            const uint4 xv = xv4[r * xld + x0 + i];
#pragma unroll
            for (int q = 0; q < kW; ++q) gemv::Dot8(wv[q], xv, acc[q][r]);
          }
        }
      }
      __syncwarp();
      if (lane == 0) MbarArrive(empty0 + 8 * slot);
    }
    if (active) gemv::WarpStore<NB, kW, kSwiGlu>(a, 0, j, roff, acc, lane);
  }
}

// ---- host ----------------------------------------------------------------------------------
std::atomic<int64_t> g_launches{0};

GemvRingMode& ModeRef() {
  static GemvRingMode mode = [] {
    const char* v = std::getenv("PEREGRINE_GEMV_RING");
    if (v == nullptr || v[0] == '\0') return GemvRingMode::kShape;
    return EnvFlag("PEREGRINE_GEMV_RING", true) ? GemvRingMode::kOn : GemvRingMode::kOff;
  }();
  return mode;
}

bool Supported(const GemvArgs& a) {
  if (a.n < 1 || a.n > kMaxRows || a.m < 1) return false;
  if (a.k % 8 || a.ldx % 8 || a.ldw % 8 ||
      ((reinterpret_cast<uintptr_t>(a.x) | reinterpret_cast<uintptr_t>(a.w)) & 15))
    return false;
  if (a.swiglu && (!a.out || a.out_f32 || a.accumulate)) return false;  // gemv.cu's contract
  if (!a.out && !a.out_f32) return false;
  return !a.norm_weight || a.n * a.k * 2 <= kMaxStageX;
}

// kShape: where the ring measured faster than the warp kernel (docs/PERF.md "TMA-ring decode
// GEMV"). Not measured yet: nowhere.
bool ShapeWantsRing(const GemvArgs& a) {
  (void)a;
  return false;
}

RingPlan PlanOf(const GemvArgs& a, int kw) {
  RingPlan p{};
  // Slot: kConsumerWarps * kw row pieces; default 16 KB (PEREGRINE_GEMV_RING_SLOT_KB).
  static const int slot_kb = std::clamp(EnvInt("PEREGRINE_GEMV_RING_SLOT_KB", 16), 4, 64);
  const int per_row = slot_kb * 1024 / (kConsumerWarps * kw * 2);     // columns
  p.chunk = std::max(256, per_row / 256 * 256);
  if (p.chunk > a.k) p.chunk = int(a.k);  // one piece per row (a multiple of 8 columns)
  p.slot_bytes = kConsumerWarps * kw * p.chunk * 2;
  const int64_t xbytes = a.n * a.k * 2;
  p.stage_x = a.norm_weight || xbytes <= kMaxStageX;
  // Ring bytes: what the budget leaves beside x (PEREGRINE_GEMV_RING_KB overrides).
  static const int ring_kb = EnvInt("PEREGRINE_GEMV_RING_KB", 0);
  const int64_t room = ring_kb > 0 ? int64_t(ring_kb) * 1024
                                   : kSmemBudget - kBarBytes - (p.stage_x ? xbytes : 0);
  p.stages = int(std::clamp<int64_t>(room / p.slot_bytes, 2, kMaxStages));
  p.x_offset = kBarBytes + p.stages * p.slot_bytes;
  return p;
}

template <int NB, bool kNorm, bool kSwiGlu, bool kPair>
void Launch(const GemvArgs& a, cudaStream_t stream) {
  constexpr int kW = kSwiGlu || kPair ? 2 : 1;
  auto* kernel = GemvRingKernel<NB, kNorm, kSwiGlu, kPair>;
  static const cudaError_t once = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
  (void)once;  // a failure surfaces as the launch's error
  const RingPlan p = PlanOf(a, kW);
  const size_t smem = size_t(p.x_offset) + (p.stage_x ? size_t(a.n * a.k * 2) : 0);
  static const int per_sm = std::clamp(EnvInt("PEREGRINE_GEMV_RING_BLOCKS_PER_SM", 1), 1, 2);
  const int64_t mj = kPair ? (a.m + 1) / 2 : a.m;
  const int64_t blocks = std::min<int64_t>(int64_t(per_sm) * MultiprocessorCount(), mj);
  g_launches.fetch_add(1, std::memory_order_relaxed);
  (void)LaunchPdl(kernel, dim3(unsigned(blocks)), dim3(kThreads), smem, stream, a, p);
}

template <bool kNorm, bool kSwiGlu>
void LaunchRows(const GemvArgs& a, cudaStream_t stream) {
  switch (a.n) {  // two rows per warp from 2 rows on (swiglu's warps already stream two)
    case 1: Launch<1, kNorm, kSwiGlu, false>(a, stream); break;
    case 2: Launch<2, kNorm, kSwiGlu, !kSwiGlu>(a, stream); break;
    case 3: Launch<3, kNorm, kSwiGlu, !kSwiGlu>(a, stream); break;
    case 4: Launch<4, kNorm, kSwiGlu, !kSwiGlu>(a, stream); break;
    default: break;  // Supported refuses other n
  }
}

}  // namespace

bool GemvRingTake(const GemvArgs& a) {
  const GemvRingMode mode = ModeRef();
  if (mode == GemvRingMode::kOff || !Supported(a)) return false;
  return mode == GemvRingMode::kOn || ShapeWantsRing(a);
}

void LaunchGemvRing(const GemvArgs& a, cudaStream_t stream) {
  const bool norm = a.norm_weight != nullptr;
  if (norm && a.swiglu) LaunchRows<true, true>(a, stream);
  else if (norm) LaunchRows<true, false>(a, stream);
  else if (a.swiglu) LaunchRows<false, true>(a, stream);
  else LaunchRows<false, false>(a, stream);
}

void SetGemvRingMode(GemvRingMode mode) { ModeRef() = mode; }
GemvRingMode GetGemvRingMode() { return ModeRef(); }
int64_t GemvRingLaunches() { return g_launches.load(std::memory_order_relaxed); }

}  // namespace pg::cuda
