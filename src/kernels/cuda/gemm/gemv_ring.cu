// Ring decode GEMV: out[r, j] = sum_i x[r, i] * w[j, i] for 1-4 rows r (GemvArgs, with the
// fused options of gemv.cu: RMSNorm prologue, SwiGLU epilogue, bias, accumulate, f32 out).
//
// One block per SM: a producer warp streams the block's weight rows into a shared-memory ring
// with 1-D bulk copies (cp.async.bulk, completion counted in bytes on the slot's "full"
// mbarrier), kConsumerWarps consumer warps take their slots in order and give each back on
// its "empty" mbarrier. The bytes in flight are the ring (160-192 KB a block), not a function of
// the warp count. PDL (common/pdl.cuh): the kernel triggers its dependents at once and the
// producer fills the ring before PdlWait (w_constant: weights are never written in a step),
// so while the previous kernel drains, this one's first ~16 MB are already on their way; the
// consumers PdlWait, stage x (normalised when asked), then consume.
//
// Work split: the warp-row space (m rows; ceil(m / 2) with two rows per warp, kPair; m gate
// rows with swiglu, whose warps also stream up row m + j) is cut into gridDim.x contiguous
// slices; in its block's slice, consumer warp w owns rows j = start + w + kConsumerWarps * t
// and walks each in pieces of `chunk` columns. A ring slot holds one piece of each weight row
// (kW) of `group` consecutive warps (group 8, the default: one slot serves all warps; group 1:
// every warp has its own slots). Slots go round-robin over the warp groups, so slot i always
// belongs to warp group i % (kConsumerWarps / group). Measured (docs/PERF.md "TMA-ring decode
// GEMV"): 1-2 KB pieces and per-warp slots are 2x slower than 4 KB pieces in 32 KB slots.
// Summation order: a lane sums the 16-byte chunks lane, lane + 32, ... of its row in order
// across the pieces (a piece is a multiple of 32 x 16 bytes), so the outputs are bitwise
// those of gemv.cu (bf16) and cuda/moe's f32 Fp8GemvKernel (fp8, LaunchFp8GemvF32; the dense
// fp8 Matmul's default is now cuda/moe's tensor-core GEMV, which sums in another order).
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "core/env.h"
#include "kernels/cuda/common/bulk_copy.cuh"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/gemm/gemv_device.cuh"
#include "kernels/cuda/gemm/gemv_ring.h"
#include "kernels/cuda/moe/moe_device.cuh"

namespace pg::cuda {
namespace {

constexpr int kConsumerWarps = 8;
constexpr int kThreads = (kConsumerWarps + 1) * 32;  // + the producer warp (the last one)
constexpr int kMaxRows = 4;
constexpr int kMaxStages = 32;                       // ring slots
constexpr int kBarBytes = 2 * kMaxStages * 8;        // full[kMaxStages], empty[kMaxStages]
constexpr int kMaxStageX = 32 * 1024;                // staged x rows (n * k * 2 bytes)

// Launch geometry, fixed per call on the host.
struct RingPlan {
  int stages;       // ring slots: a multiple of kConsumerWarps / group, <= kMaxStages
  int group;        // consumer warps sharing a slot: 1, 2, 4 or 8
  int chunk;        // columns per row piece (32 x 16 bytes a multiple; the last may be shorter)
  int slot_bytes;   // group * kW * chunk * element bytes
  int x_offset;     // byte offset of the staged x rows (stage_x)
  bool stage_x;     // x rows in shared memory (always with the norm); else read from global
  bool x_f32 = false;  // staged x widened to f32 (gemv::F32Staging; bf16 weights, stage_x)
  int x_bytes = 0;     // shared memory of the staged x rows (0 without stage_x)
  const float* w_scale = nullptr;  // fp8 weights: dequantization scale(s)
  bool scale_per_row = false;      // w_scale[row] (per output channel), else w_scale[0]
  // Latency: the norm weights in registers before PdlWait, and at one row with accumulate the
  // warp's previous output values loaded right after it (PEREGRINE_GEMV_RING_PRELOAD=0: off).
  bool preload = true;
  // The producer's wait for a free slot sleeps this many ns between polls of
  // mbarrier.try_wait (PEREGRINE_GEMV_RING_PRODUCER_SLEEP_NS; default 0: back to back). Its
  // warp shares a scheduler with two consumer warps, which then bounded a ring's pace once
  // the weights were in shared memory (block trace, docs/PERF.md "Session 13"; their slot
  // arithmetic, 64-bit divisions, was most of it: "Session 14"). H200, session 13, two calls,
  // two rounds each, 400 ns vs 0: Llama-3.1-8B 1 x 1K -40 us in one call, equal in the other;
  // 1 x 32K -40 us, then +30 us; Qwen3-30B-A3B equal: not a default (not re-measured since).
  int producer_sleep_ns = 0;
  // Diagnostic (PEREGRINE_GEMV_RING_SKIP_LOADS=1; wrong outputs): the producer arrives on each
  // slot without copying, so a call's time is the consumers' and the barriers' alone.
  bool skip_loads = false;
  // > 0: the producer's first round keeps at most this many slots in flight (slot s is issued
  // once slot s - fill_inflight, if it was issued, has landed): fewer outstanding weight reads
  // beside the previous kernel's latency-bound steps. Launch sets 2 for one-row accumulating
  // projections of k <= 8192 without norm or SwiGLU (the o projection after an attention,
  // whose blocks fill beside the attention's); PEREGRINE_GEMV_RING_FILL_INFLIGHT=n forces n
  // there (0: unpaced). H100, 1 x 1K, three rounds (docs/PERF.md "Session 35"): Llama-3.1-8B
  // 5269.8 -> 5252.1 us a step with 2 (5307.2 with 1), Qwen3-8B 5516.2 -> 5484.1 (5590.3).
  int fill_inflight = 0;
};

// ---- mbarrier / bulk-copy primitives (sm_90): common/bulk_copy.cuh -------------------------
using bulk::BulkLoad;
using bulk::EvictFirstPolicy;
using bulk::MbarArrive;
using bulk::MbarArriveExpectTx;
using bulk::MbarInit;
using bulk::MbarWait;
using bulk::RingCursor;
using bulk::SmemAddr;
__device__ __forceinline__ void ConsumerBarrier() {  // the consumer warps only (named barrier 1)
  bulk::NamedBarrier<kConsumerWarps * 32>(1);
}

// The consumers' view of x's rows (row r, 16-byte bf16 chunk u): Load gives what Dot takes.
struct XBf16 {  // bf16 chunks, row stride ld chunks (shared or global)
  const uint4* x;
  int64_t ld;
  __device__ __forceinline__ uint4 Load(int r, int64_t u) const { return x[r * ld + u]; }
  __device__ __forceinline__ static void Dot(const uint4& w, const uint4& v, float& acc) { gemv::Dot8(w, v, acc); }
};
struct XF32 {  // staged widened (gemv::F32Staging)
  gemv::F32Staging s;
  __device__ __forceinline__ gemv::F32Staging::Chunk Load(int r, int64_t u) const { return s.Read(r, u); }
  __device__ __forceinline__ static void Dot(const uint4& w, const gemv::F32Staging::Chunk& v, float& acc) {
    gemv::Dot8(w, v.lo, v.hi, acc);
  }
};

// kFp8: w holds fp8 e4m3 bytes (a.w reinterpreted; a.ldw in bytes) scaled by p.w_scale
// (one scale, or one per row with p.scale_per_row), no norm / swiglu / f32 output; the sums
// are those of cuda/moe's Fp8GemvKernel (16-element parts, scaled after the warp sum).
template <int NB, bool kNorm, bool kSwiGlu, bool kPair, bool kFp8 = false>
__global__ void __launch_bounds__(kThreads, 2) GemvRingKernel(GemvArgs a, RingPlan p) {
  PG_BLOCK_TRACE(kTraceGemvRing);
  constexpr int kW = kSwiGlu || kPair ? 2 : 1;  // weight rows per warp: j (and j + roff)
  constexpr int kWb = kFp8 ? 1 : 2;             // bytes per weight element
  constexpr int kXu = kFp8 ? 2 : 1;             // x 16-byte units per weight 16-byte unit
  extern __shared__ __align__(128) unsigned char smem[];
  PdlTrigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t mj = kPair ? (a.m + 1) / 2 : a.m;  // the warp-row space
  const int64_t roff = kSwiGlu ? a.m : mj;         // offset of a warp's second row
  const int64_t jb = mj * blockIdx.x / gridDim.x, je = mj * (blockIdx.x + 1) / gridDim.x;
  const int ng = kConsumerWarps / p.group;        // warp groups: slot i serves group i % ng
  const int64_t rows = je - jb;
  // Rows of warp w: j = jb + w + kConsumerWarps * t < je.
  auto rows_of_warp = [&](int w) -> int64_t {
    return rows > w ? (rows - w + kConsumerWarps - 1) / kConsumerWarps : 0;
  };
  const int64_t chunks = (a.k + p.chunk - 1) / p.chunk;
  const uint32_t full0 = SmemAddr(smem), empty0 = full0 + kMaxStages * 8;
  const uint32_t ring0 = SmemAddr(smem + kBarBytes);
  // kPair with odd m: the last warp-row has no partner; it streams its own row twice.
  auto row_of = [&](int64_t j, int q) {
    return kSwiGlu || q == 0 || j + q * roff < a.m ? j + q * roff : j;
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < p.stages; ++s) {
      MbarInit(full0 + 8 * s, 1);         // the producer's arrive (+ the bytes)
      MbarInit(empty0 + 8 * s, p.group);  // one arrive per consumer warp of the group
    }
    bulk::FenceMbarInit();
  }
  __syncthreads();

  if (warp == kConsumerWarps) {  // ---- producer ----------------------------------------------
    if (!a.w_constant) PdlWait();
    const uint64_t policy = EvictFirstPolicy();
    const unsigned char* wbytes = reinterpret_cast<const unsigned char*>(a.w);
    // Lane l < group * kW copies the slot's piece l: warp group * gi + l / kW, its row l % kW.
    const int lw = lane / kW, q = lane % kW;
    // Slot s = (t * chunks + c) * ng + gi (row round t, piece c, warp group gi), in that order.
    RingCursor ring_at;
    const int64_t trows = rows_of_warp(0);  // warp 0 has the most rows
    // First round (lin < stages <= 32): bit i = slot i was armed (its full barrier will pass).
    uint32_t armed = 0;
    int lin = 0;  // slots passed, counted to the first round's end
    for (int64_t t = 0; t < trows; ++t) {
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t k0 = c * p.chunk;
        const uint32_t piece = uint32_t(a.k - k0 < p.chunk ? a.k - k0 : p.chunk) * kWb;
        for (int gi = 0; gi < ng; ++gi, ring_at.Advance(1, p.stages), lin += lin < p.stages) {
          const int slot = ring_at.slot;
          if (t < rows_of_warp(gi * p.group)) {  // else the group's rows are done (tail only)
            const int64_t j = jb + gi * p.group + lw + int64_t(kConsumerWarps) * t;
            const bool copies = lane < p.group * kW && j < je;
            const uint32_t bytes = uint32_t(__popc(__ballot_sync(0xffffffffu, copies))) * piece;
            if (lin < p.stages) armed |= 1u << lin;
            if (lane == 0) {
              bulk::PaceFirstFill(full0, lin, p.fill_inflight, p.stages, armed);
              // A fresh barrier passes parity 1 at once.
              MbarWait(empty0 + 8 * slot, ring_at.phase ^ 1, p.producer_sleep_ns);
              if (p.skip_loads) MbarArrive(full0 + 8 * slot);
              else MbarArriveExpectTx(full0 + 8 * slot, bytes);
            }
            __syncwarp();
            if (copies && !p.skip_loads)
              BulkLoad(ring0 + uint32_t(slot) * p.slot_bytes + uint32_t(lane) * uint32_t(p.chunk) * kWb,
                       wbytes + (row_of(j, q) * a.ldw + k0) * kWb, piece, full0 + 8 * slot, policy);
          }
        }
      }
    }
    return;
  }

  // ---- consumers ---------------------------------------------------------------------------
  [[maybe_unused]] gemv::NormWeightRegs<kConsumerWarps * 32> nw;
  if constexpr (kNorm)
    if (p.preload) nw.Load(a.norm_weight, a.norm_type, a.k, threadIdx.x);
  PdlWait();
  // One row with accumulate: lane t holds the output value of the warp's row t (loaded now,
  // beside x, instead of a dependent load in each row's WarpStore). Only this warp writes
  // those rows.
  constexpr bool kPrevForm = NB == 1 && kW == 1;
  const int64_t my_rows = rows_of_warp(warp);
  const bool use_prev = kPrevForm && p.preload && a.accumulate && my_rows <= 32;
  float prev = 0.0f;
  if (use_prev && lane < my_rows) {
    const int64_t jl = jb + warp + int64_t(kConsumerWarps) * lane;
    prev = a.out_f32 ? a.out_f32[jl] : ToF(a.out[jl]);
  }
  uint4* xs = reinterpret_cast<uint4*>(smem + p.x_offset);
  // The f32 form is built for one bf16 activation row only (PlanOf sets x_f32 nowhere else).
  constexpr bool kXF32Form = !kFp8 && NB == 1;
  const XF32 xw{{reinterpret_cast<float4*>(xs), gemv::F32RowVecs(a.k)}};
  if (kXF32Form && p.x_f32)
    gemv::StageRowsTo<NB, kConsumerWarps>(a, 0, xw.s, threadIdx.x, kNorm, [] { ConsumerBarrier(); }, &nw);
  else if (p.stage_x)
    gemv::StageRows<NB, kConsumerWarps>(a, 0, xs, threadIdx.x, kNorm, [] { ConsumerBarrier(); }, &nw);
  PG_TRACE_MARK(0);  // x staged
  const int64_t xld = p.stage_x ? a.k / 8 : a.ldx / 8;  // row stride of x, 16-byte units
  const int piece_v = p.chunk * kWb / 16;               // 16-byte units per row piece
  const uint4* ring = reinterpret_cast<const uint4*>(smem + kBarBytes);
  const int gi = warp / p.group, lw = warp % p.group;
  const int64_t trows = rows_of_warp(gi * p.group);  // the group's row rounds
  // xr: x's rows (XBf16: staged, a shared-memory pointer the compiler sees as one: LDS, or
  // global; XF32: staged widened).
  auto consume = [&](const auto& xr) {
    // The producer's slot order: s = (t * chunks + c) * ng + gi; this group's slots are s = gi,
    // gi + ng, ... (stages is a multiple of ng).
    RingCursor ring_at{gi, 0};
    for (int64_t t = 0; t < trows; ++t) {
      const int64_t j = jb + warp + int64_t(kConsumerWarps) * t;
      const bool active = j < je;
      float acc[kW][NB];
#pragma unroll
      for (int q = 0; q < kW; ++q)
#pragma unroll
        for (int r = 0; r < NB; ++r) acc[q][r] = 0.0f;
      for (int64_t c = 0; c < chunks; ++c, ring_at.Advance(ng, p.stages)) {
        const int slot = ring_at.slot;
        MbarWait(full0 + 8 * slot, ring_at.phase);
        if (t == 0 && c == 0 && gi == 0) PG_TRACE_MARK(1);  // the first slot landed
        if (active) {
          const uint4* wr = ring + int64_t(slot) * (p.slot_bytes / 16) + lw * kW * piece_v;
          const int64_t k0 = c * p.chunk, x0 = k0 / 8;
          const int nv = int(a.k - k0 < p.chunk ? a.k - k0 : p.chunk) * kWb / 16;
#pragma unroll 4
          for (int i = lane; i < nv; i += 32) {
            uint4 wv[kW];
#pragma unroll
            for (int q = 0; q < kW; ++q) wv[q] = wr[q * piece_v + i];
            if constexpr (kFp8) {
              float wf[kW][16];
#pragma unroll
              for (int q = 0; q < kW; ++q) moe::Widen<true>(wv[q], wf[q]);
#pragma unroll
              for (int r = 0; r < NB; ++r) {
                float xf[16];
                moe::Widen<false>(xr.x[r * xld + x0 + kXu * i], xf);
                moe::Widen<false>(xr.x[r * xld + x0 + kXu * i + 1], xf + 8);
#pragma unroll
                for (int q = 0; q < kW; ++q) {
                  float part = 0.0f;
#pragma unroll
                  for (int e = 0; e < 16; ++e) part = fmaf(wf[q][e], xf[e], part);
                  acc[q][r] = fmaf(part, 1.0f, acc[q][r]);
                }
              }
            } else {
#pragma unroll
              for (int r = 0; r < NB; ++r) {
                const auto xv = xr.Load(r, x0 + i);
#pragma unroll
                for (int q = 0; q < kW; ++q) xr.Dot(wv[q], xv, acc[q][r]);
              }
            }
          }
        }
        __syncwarp();
        if (lane == 0) MbarArrive(empty0 + 8 * slot);
      }
      if (active) {
        float scale[kW];
#pragma unroll
        for (int q = 0; q < kW; ++q)
          scale[q] = kFp8 ? __ldg(p.w_scale + (p.scale_per_row ? row_of(j, q) : 0)) : 1.0f;
        const float pv = use_prev ? __shfl_sync(0xffffffffu, prev, int(t)) : 0.0f;
        gemv::WarpStore<NB, kW, kSwiGlu>(a, 0, j, roff, acc, lane, scale, use_prev, pv);
      }
      if (t == 0) PG_TRACE_MARK(3);  // the first row stored
    }
  };
  if (kXF32Form && p.x_f32) {
    if constexpr (kXF32Form) consume(xw);  // (the fp8 consumers read bf16 chunks only)
  } else {
    consume(XBf16{p.stage_x ? xs : reinterpret_cast<const uint4*>(a.x), xld});
  }
  PG_TRACE_MARK(2);  // this warp's rows stored
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
// GEMV", H200, PDL on): one activation row and k >= 4096 (Llama-3.1-8B qkv 14.8 vs 17.1 us,
// down 30.9 vs 32.3, gate_up 55.9 vs 56.5, lm_head 235 vs 244, o 11.1 vs 10.9; Qwen3-30B-A3B
// o 7.0 vs 7.2). Not at 2-4 rows (the 8 consumer warps are issue-bound: qkv 21.7 vs 21.8,
// down 52.6 vs 39.4 at 4 rows). At k = 2048 the ring alone is slower (Qwen3-30B-A3B qkv 8.1
// vs 7.7 us, lm_head 145 vs 142), but a normed projection of 4096-65536 rows (an attention's
// qkv: Qwen3-30B-A3B 5120 x 2048; not the lm_heads, nor DeepSeek-V2-Lite's q + kv_a of 3648
// rows) takes it from k >= PEREGRINE_GEMV_RING_NORM_MIN_K (default 2048; 4096 = the old
// rule): one block an SM with room beside it for the small decode attention's blocks
// (decode_attention_mma.cu kSmallStages), which then load their keys during the projection
// instead of after it (docs/PERF.md "session 9": Qwen3-30B-A3B batch 1 step -45 us at 1K,
// -85 us in the 2048-key graph set, with the small attention's new block rule).
// PEREGRINE_GEMV_RING_NORM_MIN_M (default 4096) lowers the rows' bound for A/B runs (2048:
// DeepSeek-V2-Lite's q + kv_a too).
bool ShapeWantsRing(const GemvArgs& a) {
  static const int norm_min_k = EnvInt("PEREGRINE_GEMV_RING_NORM_MIN_K", 2048);
  static const int norm_min_m = EnvInt("PEREGRINE_GEMV_RING_NORM_MIN_M", 4096);
  if (a.n != 1) return false;
  if (a.k >= 4096) return true;
  return a.norm_weight != nullptr && a.k >= norm_min_k && a.m >= norm_min_m && a.m <= 65536;
}

// fp8: the consumers widen 16 e4m3 weights and 16 activations per 16 bytes and are issue-bound
// on 8 warps (Llama-3.1-8B fp8 qkv 21.3 vs 11.0 us at one row): nowhere. (cuda/moe's
// tensor-core fp8 GEMV, LaunchFp8Gemv's default, is what the dense fp8 Matmul runs; its
// shared-memory variant takes this ring's bytes-in-flight idea with per-lane cp.async.)
bool ShapeWantsRingFp8(const Fp8GemvArgs& f) {
  (void)f;
  return false;
}

int& XF32Ref() {  // SetGemvRingXF32
  static int mode = EnvInt("PEREGRINE_GEMV_RING_XF32", 3);
  return mode;
}
std::atomic<int64_t> g_xf32_launches{0};
int& Pair1Ref() {  // SetGemvRingPair1
  static int mode = EnvInt("PEREGRINE_GEMV_RING_PAIR1", -1);
  return mode;
}

// wb: bytes per weight element (2 bf16, 1 fp8). Defaults (env overrides, for A/B runs), the
// best of request 3's layouts: one slot serves all 8 consumer warps (PEREGRINE_GEMV_RING_GROUP
// =8; per-warp slots measured 2x slower), row pieces of 4 KB / kw (PEREGRINE_GEMV_RING_PIECE_KB),
// so a slot is 32 KB also where a warp streams two rows (kPair, SwiGLU; 4 KB pieces made those
// 64 KB slots, 2-3 a ring; H200, session 15, with pairs everywhere and f32 x: Llama-3.1-8B
// 1 x 1K -40 to -46 us a step, Qwen3-30B-A3B -39 to -46, Llama 1 x 32K +30: docs/PERF.md
// "Session 15"), as many slots as fit up to 6 (PEREGRINE_GEMV_RING_DEPTH) in
// PEREGRINE_GEMV_RING_BUDGET_KB (200: ring + x, one block an SM; 160-192 KB in flight an SM).
// (Five slots at k < 4096, where six fit, so that a 4-warp small decode attention block fits
// beside: measured equal or slower on Qwen3-30B-A3B's qkv, docs/PERF.md "session 9".)
RingPlan PlanOf(const GemvArgs& a, int kw, int wb) {
  static const int group_env = EnvInt("PEREGRINE_GEMV_RING_GROUP", 8);
  static const int piece_kb = EnvInt("PEREGRINE_GEMV_RING_PIECE_KB", 0);
  static const int depth_env = std::clamp(EnvInt("PEREGRINE_GEMV_RING_DEPTH", 6), 1, 32);
  static const int budget = std::clamp(EnvInt("PEREGRINE_GEMV_RING_BUDGET_KB", 200), 32, 220) * 1024;
  RingPlan p{};
  p.group = group_env == 2 || group_env == 4 || group_env == 8 ? group_env : 1;
  const int ng = kConsumerWarps / p.group;
  const int unit = 32 * 16 / wb;  // columns of 32 lanes x 16 bytes
  const int piece = piece_kb > 0 ? piece_kb * 1024 : 4096 / kw;
  p.chunk = std::max(unit, piece / wb / unit * unit);
  if (p.chunk > a.k) p.chunk = int(a.k);  // one piece per row (a multiple of 16 bytes)
  const int64_t xbytes = a.n * a.k * 2;
  p.stage_x = a.norm_weight || xbytes <= kMaxStageX;
  // Staged x widened to f32 (SetGemvRingXF32's mask: bit 0 normed projections, bit 1 the
  // others) where it takes at most PEREGRINE_GEMV_RING_XF32_MAX_KB (16: one row of k <= 4096) of
  // shared memory: 8 fewer instructions a 16-byte weight chunk for the consumers, same sums.
  const bool xf32_env = (XF32Ref() & (a.norm_weight != nullptr ? 1 : 2)) != 0;
  static const int xf32_max = EnvInt("PEREGRINE_GEMV_RING_XF32_MAX_KB", 16) * 1024;
  const int64_t xf32_bytes = a.n * gemv::F32RowVecs(a.k) * 16;
  p.x_f32 = xf32_env && wb == 2 && a.n == 1 && p.stage_x && xf32_bytes <= xf32_max;
  p.x_bytes = p.stage_x ? int(p.x_f32 ? xf32_bytes : xbytes) : 0;
  const int64_t room = budget - kBarBytes - p.x_bytes;
  // A one-row normed projection that is no SwiGLU (an attention's qkv): its blocks share the
  // SMs with the decode attention's, so at most PEREGRINE_GEMV_RING_QKV_DEPTH slots (default
  // 4: a small attention block fits beside it — by shared memory two would, but registers,
  // allocated per SM sub-partition, allow one: docs/PERF.md "Session 13"). H200, session 12,
  // two rounds each, with the split release: Llama-3.1-8B 1 x 1K -10 us a step, 4 x 4K -20,
  // 1 / 8 x 32K equal; Qwen3-30B-A3B 1 x 1K -9 to -20, 1 x 4K -100 (3258 / 3274 -> 3162 /
  // 3158 us), 8 x 1K equal; 3 slots +290 / +170 us (docs/PERF.md "Session 12").
  static const int qkv_depth = std::clamp(EnvInt("PEREGRINE_GEMV_RING_QKV_DEPTH", 4), 1, 32);
  int depth = std::min(depth_env, kMaxStages / ng);
  if (a.norm_weight != nullptr && !a.swiglu && a.n == 1) depth = std::min(depth, qkv_depth);
  for (;;) {
    p.slot_bytes = p.group * kw * p.chunk * wb;
    while (depth > 1 && int64_t(ng) * depth * p.slot_bytes > room) --depth;
    if (int64_t(ng) * depth * p.slot_bytes <= room || p.chunk <= unit) break;
    p.chunk = std::max(unit, p.chunk / 2 / unit * unit);  // one slot a group does not fit
  }
  p.stages = ng * depth;
  p.x_offset = kBarBytes + p.stages * p.slot_bytes;
  return p;
}

template <int NB, bool kNorm, bool kSwiGlu, bool kPair, bool kFp8 = false>
void Launch(const GemvArgs& a_in, cudaStream_t stream, const float* w_scale = nullptr,
            bool scale_per_row = false) {
  // PEREGRINE_GEMV_RING_LATE_PRODUCER=1 (diagnostic A/B): the producer streams only after the
  // PDL wait, as if the weights were not constant.
  static const bool late_producer = EnvFlag("PEREGRINE_GEMV_RING_LATE_PRODUCER", false);
  GemvArgs a = a_in;
  if (late_producer) a.w_constant = false;
  constexpr int kW = kSwiGlu || kPair ? 2 : 1;
  auto* kernel = GemvRingKernel<NB, kNorm, kSwiGlu, kPair, kFp8>;
  // The kernel's dynamic shared memory limit: the device's opt-in maximum less the kernel's
  // static shared memory (StageRows' partial sums), set once (a failure surfaces as the
  // launch's error).
  static const int smem_limit = [kernel] {
    int dev = 0, optin = 0;
    cudaFuncAttributes fa{};
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
        cudaFuncGetAttributes(&fa, kernel) != cudaSuccess)
      return 48 * 1024;
    const int limit = optin - int(fa.sharedSizeBytes);
    (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit);
    // The largest L1 / shared carveout (PEREGRINE_GEMV_RING_CARVEOUT, percent; -1: the
    // driver's choice): an SM keeps its split until it drains, so a block of 137-173 KB alone
    // may leave the SM at a 164 / 196 KB split, with no room for the small decode attention's
    // blocks (decode_attention_mma.cu kSmallStages) that PDL launches beside it.
    static const int carveout = EnvInt("PEREGRINE_GEMV_RING_CARVEOUT", 100);
    if (carveout >= 0)
      (void)cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, carveout);
    return limit;
  }();
  static const bool preload = EnvFlag("PEREGRINE_GEMV_RING_PRELOAD", true);
  static const int producer_sleep =
      std::clamp(EnvInt("PEREGRINE_GEMV_RING_PRODUCER_SLEEP_NS", RingPlan{}.producer_sleep_ns), 0, 100000);
  RingPlan p = PlanOf(a, kW, kFp8 ? 1 : 2);
  p.preload = preload;
  p.producer_sleep_ns = producer_sleep;
  static const bool skip_loads = EnvFlag("PEREGRINE_GEMV_RING_SKIP_LOADS", false);
  p.skip_loads = skip_loads;
  static const int fill_env = std::clamp(EnvInt("PEREGRINE_GEMV_RING_FILL_INFLIGHT", 2), 0, kMaxStages);
  if (a.n == 1 && a.accumulate && !a.norm_weight && !kSwiGlu && a.k <= 8192) p.fill_inflight = fill_env;
  // The attention's normed one-row qkv paced too (PEREGRINE_GEMV_RING_QKV_FILL_INFLIGHT=n; 0:
  // unpaced): its 4-slot fill was issued at once on every SM as its blocks start (its first
  // slot landed ~2.9 us after that in session 35's Qwen3-30B-A3B trace). H100, 1 x 1K, two
  // rounds (docs/PERF.md "Session 36"): 2 slots in flight, Qwen3-30B-A3B 2912.6 -> 2908.8 us a
  // step, Llama-3.1-8B 5250.2 -> 5245.1 (5 / 6 slots of the qkv ring instead: +15.6 / +13.7).
  static const int qkv_fill_env = std::clamp(EnvInt("PEREGRINE_GEMV_RING_QKV_FILL_INFLIGHT", 2), 0, kMaxStages);
  if (a.n == 1 && a.norm_weight && !kSwiGlu) p.fill_inflight = qkv_fill_env;
  p.w_scale = w_scale;
  p.scale_per_row = scale_per_row;
  const size_t smem = size_t(p.x_offset) + size_t(p.x_bytes);
  static const int per_sm = std::clamp(EnvInt("PEREGRINE_GEMV_RING_BLOCKS_PER_SM", 1), 1, 2);
  const int64_t mj = kPair ? (a.m + 1) / 2 : a.m;
  const int64_t blocks = std::min<int64_t>(int64_t(per_sm) * MultiprocessorCount(), mj);
  static const bool log = EnvFlag("PEREGRINE_GEMV_RING_LOG", false);
  if (log || smem > size_t(smem_limit))
    std::fprintf(stderr,
                 "gemv ring: n=%lld k=%lld m=%lld kw=%d fp8=%d grid=%lld block=%d smem=%zu (limit %d) "
                 "stages=%d group=%d chunk=%d slot=%d stage_x=%d\n",
                 (long long)a.n, (long long)a.k, (long long)a.m, kW, int(kFp8), (long long)blocks,
                 kThreads, smem, smem_limit, p.stages, p.group, p.chunk, p.slot_bytes, int(p.stage_x));
  g_launches.fetch_add(1, std::memory_order_relaxed);
  if (p.x_f32) g_xf32_launches.fetch_add(1, std::memory_order_relaxed);
  (void)LaunchPdl(kernel, dim3(unsigned(blocks)), dim3(kThreads), smem, stream, a, p);
}

template <bool kNorm, bool kSwiGlu>
void LaunchRows(const GemvArgs& a, cudaStream_t stream) {
  switch (a.n) {  // two rows per warp from 2 rows on (swiglu's warps already stream two)
    case 1: {
      // Two weight rows a warp at one row as well (kPair): x read and widened once for both,
      // two independent sums a lane. Where (SetGemvRingPair1: -1 = every projection; else a
      // bit mask, bit 0 the normed projections, bit 1 the others). Session 14 (4 KB pieces, 64
      // KB slots): only the normed ones of k >= 4096 gained (Llama-3.1-8B 1 x 1K -26 / -11 us a
      // step); session 15 (32 KB slots, PlanOf) everywhere, with f32 x: Llama 1 x 1K -40 us,
      // Qwen3-30B-A3B -46.
      const int pair1 = Pair1Ref();
      const bool pair = !kSwiGlu && (pair1 < 0 || (pair1 & (kNorm ? 1 : 2)) != 0);
      if (pair) Launch<1, kNorm, kSwiGlu, !kSwiGlu>(a, stream);
      else Launch<1, kNorm, kSwiGlu, false>(a, stream);
      break;
    }
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

bool Fp8GemvRingTake(const Fp8GemvArgs& f) {
  const GemvRingMode mode = ModeRef();
  if (mode == GemvRingMode::kOff || f.n < 1 || f.n > kMaxRows || f.m < 1 || !f.out) return false;
  if (f.scale_mode != ScaleMode::kTensor && f.scale_mode != ScaleMode::kChannel) return false;
  if (f.k % 16 || f.ldx % 8 || f.ldw % 16 ||
      ((reinterpret_cast<uintptr_t>(f.x) | reinterpret_cast<uintptr_t>(f.w)) & 15))
    return false;
  return mode == GemvRingMode::kOn || ShapeWantsRingFp8(f);
}

void LaunchFp8GemvRing(const Fp8GemvArgs& f, cudaStream_t stream) {
  // The weight bytes travel as GemvArgs::w (ldw in bytes = elements); the kernel reads them
  // as fp8 (kFp8).
  GemvArgs a{f.x, reinterpret_cast<const bf16*>(f.w), f.out, f.bias, f.n, f.k, f.m,
             f.ldx, f.ldw, f.ldo, f.accumulate};
  a.w_constant = true;  // the dense fp8 Matmul's w is a weight
  const bool per_row = f.scale_mode == ScaleMode::kChannel;
  switch (f.n) {
    case 1: Launch<1, false, false, false, true>(a, stream, f.scale, per_row); break;
    case 2: Launch<2, false, false, true, true>(a, stream, f.scale, per_row); break;
    case 3: Launch<3, false, false, true, true>(a, stream, f.scale, per_row); break;
    case 4: Launch<4, false, false, true, true>(a, stream, f.scale, per_row); break;
    default: break;  // Fp8GemvRingTake refuses other n
  }
}

void SetGemvRingMode(GemvRingMode mode) { ModeRef() = mode; }
GemvRingMode GetGemvRingMode() { return ModeRef(); }
int64_t GemvRingLaunches() { return g_launches.load(std::memory_order_relaxed); }
int SetGemvRingXF32(int mode) { return std::exchange(XF32Ref(), mode); }
int SetGemvRingPair1(int mode) { return std::exchange(Pair1Ref(), mode); }
int64_t GemvRingXF32Launches() { return g_xf32_launches.load(std::memory_order_relaxed); }

}  // namespace pg::cuda
