// Device-side description of the persistent batch-1 decode kernel (mega_kernel.cu): a program
// of GEMV steps run by one cooperative grid (one block per SM, all co-resident) in order, each
// step waiting for the previous one through a global counter. Filled by mega_program.cpp.
//
// Shapes (batch 1, bf16): a step reads a vector x [k] and a weight w [rows, k] (row stride ldw,
// 16-byte aligned rows, k % 8 == 0) and writes out [m]:
//   kNormProject : out[j] = bf16(dot(RmsNorm(x), w[j]) (+ bias[j])), m = rows
//   kAccumulate  : out[j] = bf16(out[j] + dot(x, w[j]))              , m = rows
//   kNormSwiGlu  : g = bf16(dot(RmsNorm(x), w[j])), u = bf16(dot(RmsNorm(x), w[m + j])),
//                  out[j] = bf16(silu(g) * u)                         , m = rows / 2
//   kAttention   : x = the layer's qkv row of the one new token ([heads + 2 kv_heads][128]:
//                  q, k, v heads before RoPE); RoPE on q and k (rounded to bf16), k and v
//                  written to the token's cache slot, out = causal attention of the rotated q
//                  over the sequence's cached keys and the new one ([heads][128] bf16): what
//                  ops::RopeKvWrite + ops::Attention compute (bf16 KV, scales 1, no window).
// RmsNorm's output is rounded to bf16 (as ops::RmsNorm / the fused GEMV), so the rounding
// points are those of the unfused ops.
#pragma once

#include <cstdint>

#include "kernels/cuda/common/device_params.h"

namespace pg::cuda {

enum class MegaKind : int32_t { kNormProject = 0, kAccumulate = 1, kNormSwiGlu = 2, kAttention = 3 };

// Tiling (shared by the host plan and the kernel): a tile is kMegaTileRows weight rows (with
// swiglu: kMegaTileRows / 2 gate rows and their up rows); it streams through the block's
// shared-memory ring in chunks of kMegaChunk columns (one stage = 8 rows x 1024 bf16 = 16 KB).
inline constexpr int kMegaTileRows = 8;
inline constexpr int kMegaChunk = 1024;
inline constexpr int kMegaStages = 12;
inline constexpr int kMegaMaxK = 16384;  // the staged activation vector (32 KB)
inline constexpr int kMegaConsumerWarps = kMegaTileRows;  // warp w reads tile row w
inline constexpr int kMegaThreads = (kMegaConsumerWarps + 1) * 32;  // + one producer warp
inline constexpr int kMegaStageBytes = kMegaTileRows * kMegaChunk * 2;
inline constexpr int kMegaSmemBytes = kMegaStages * kMegaStageBytes + kMegaMaxK * 2;
// Row mode (MegaArgs::row_mode): the same ring as kMegaRowSlots slots of kMegaRowSlotBytes; a
// slot holds stage_rows WHOLE consecutive rows of w (swiglu: stage_rows / 2 gate rows, then
// their up rows), one bulk copy each (rows packed: ldw == k); a block owns a contiguous range
// of row groups. 8 / stage_rows consumer warps share a row (a piece of k / (8 / stage_rows)
// columns each) and one thread sums their partials in warp order.
inline constexpr int kMegaRowSlots = kMegaStages / 2;
inline constexpr int kMegaRowSlotBytes = 2 * kMegaStageBytes;
// Attention steps: head_dim 128 (4 dims per lane), up to 4 query heads per kv head (their
// per-warp partials live in the activation region), splits of >= 32 keys.
inline constexpr int kMegaHeadDim = 128;
inline constexpr int kMegaMaxGroup = 4;
inline constexpr int kMegaMinSplitKeys = 32;
inline constexpr int kMegaMaxLayers = 128;

struct MegaStep {
  MegaKind kind;
  int32_t k;          // columns of w = length of x
  int32_t m;          // outputs
  int32_t num_tiles;  // tile mode: ceil(m / 8) (ceil(m / 4) with swiglu); row mode: row groups
  int32_t stage_rows; // row mode: rows a slot holds (1, 2, 4 or 8; >= 2 with swiglu)
  // Warp mode (mega_warp.cu): a swiglu step writes its [2m] bf16 projection to out, and the
  // step after it (kAccumulate) stages silu(swiglu_in[i]) * swiglu_in[k + i] as its input.
  const bf16* swiglu_in;
  int64_t ldw;        // elements between rows of w
  const bf16* w;
  const bf16* x;               // [k]
  bf16* out;                   // [m]
  const float* bias;           // optional [m] (kNormProject only)
  const void* norm_weight;     // [k] of norm_type (norm kinds)
  WeightType norm_type;
  float eps;
  // kAttention only (x: the qkv row, out: [heads][128]):
  int32_t layer;              // index of the layer's caches in MegaArgs
  int32_t heads, kv_heads;
  int32_t max_splits;         // splits per kv head at most (partial's capacity)
  float scale;                // softmax scale
  const float* inv_freq;      // [64] RoPE inverse frequencies, neox pairs (i, i + 64)
  float* partial;             // [heads][max_splits][128 + 2]: acc, then max (log2 units), sum
  uint32_t* group_counters;   // [kv_heads] split blocks arrived (0 between launches)
};

// One launch runs steps [begin, end) of `steps`. counters[i] counts the blocks that finished
// step i in this launch; counters[num_steps] counts blocks that finished the launch.
// Invariant: every counter is 0 when a launch starts (set at allocation; the last block to
// finish a launch — all others are past their last wait — zeroes the counters it used).
struct MegaArgs {
  const MegaStep* steps;
  int32_t begin, end, num_steps;
  uint32_t* counters;  // [num_steps + 1]
  // kAttention steps: the one-sequence, one-token batch and each layer's bf16 caches
  // [num_pages, page_size, kv_heads, 128].
  DeviceBatchView batch;
  int32_t kv_prefetch_keys;  // keys per task the producer asks L2 for ahead (0: none)
  int32_t attn_unroll;       // keys a warp loads at once in the key loop: 8 or 16
  // Optional timeline (PEREGRINE_MEGA_TRACE): [num_steps][gridDim][4] globaltimer ns per
  // block and step: producer reached the step, consumers past the wait, input staged (or
  // attention done), tiles done.
  uint64_t* trace;
  int32_t row_mode;          // GEMV steps stream whole rows (kMegaRowSlots slots), else tiles
  bf16* k_cache[kMegaMaxLayers];
  bf16* v_cache[kMegaMaxLayers];
};

}  // namespace pg::cuda
