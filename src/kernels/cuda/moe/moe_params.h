// Plain parameter structs and launchers of the CUDA MoE kernels (ops_moe.h MoeRouter,
// MoeExperts) and of the grouped GEMM they share with the fp8 block-scaled dense Matmul.
// Filled by moe_register.cpp; device code sees raw pointers only (DESIGN.md example 3).
//
// Units: *_stride / ld* are in ELEMENTS between consecutive rows; inner dims are packed.
// Activations are bf16, accumulation f32, router outputs f32 / i32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common/device_params.h"  // WeightType

namespace pg::cuda {

using bf16 = __nv_bfloat16;

// ---- router ---------------------------------------------------------------------------------
// One warp per token (moe_router.cu). Semantics: ops_moe.h MoeRouterParams.
// Fused form (x != null): ONE kernel computes logits[t, e] = x[t] . router_w[e] (f32, one warp
// per expert, router rows loaded before PdlWait) and the block that finishes last (arrival
// counter) routes every token. Launches sharing one counter must be stream-ordered.
inline constexpr int kRouterMaxExperts = 1024;
inline constexpr int kRouterMaxTopK = 32;
inline constexpr int kRouterMaxGroups = 32;
// Routing held in registers (moe_route.cuh): up to this many experts (8 per lane); the walking
// kernels' self-routing needs it.
inline constexpr int kRouteRegMaxExperts = 256;
struct MoeRouterArgs {
  const void* logits;     // [num_tokens, num_experts], row stride logits_stride (fused: written, f32)
  bool logits_bf16;       // else f32
  const bf16* x;          // fused: [num_tokens, hidden], row stride ldx (else null)
  const bf16* router_w;   // fused: [num_experts, hidden], row stride ld_router
  int64_t ldx, ld_router;
  int hidden;
  unsigned* counter;      // fused: arrival counter, 0 between launches (the last block resets it)
  // Fused RMSNorm in front (optional, with x; ops_moe.h): v = residual ? bf16(residual + x) : x,
  // normed = bf16(v * rsqrt(mean(v^2) + eps) * norm_w); logits from normed. The last block
  // writes residual (v) and normed.
  const float* norm_w;    // [hidden] f32, or null
  bf16* normed;           // [num_tokens, hidden], row stride ld_normed
  bf16* residual;         // optional [num_tokens, hidden], row stride ld_res
  int64_t ld_normed, ld_res;
  float eps;
  const float* bias;      // optional [num_experts]
  int32_t* topk_ids;      // [num_tokens, top_k]
  float* topk_weights;    // [num_tokens, top_k]
  int64_t logits_stride, weights_stride;
  int64_t num_tokens;
  int num_experts, top_k, num_groups, topk_groups;
  bool sigmoid, renormalize;
  float scaling;
  // Fused form only: compute the logits (and, with the norm, `normed`, stored by block 0) and
  // stop: no routing, no counter. The walking gate/up kernel routes from the logits
  // (MoeWalkArgs::self_route). Needs no residual (block 0 would overwrite another block's input).
  bool defer_route;
  // The deferred-routing NormLogits form at one token: right after its PDL wait (the o
  // projection done, the HBM idle through the routing), block i of n asks the L2 for share i
  // of these weights (the next layer's qkv: MoeExpertsParams::l2_after at
  // MoeTuning::walk_router_l2_pct). A hint: no effect on any result.
  L2After l2_after;
};
void LaunchMoeRouter(const MoeRouterArgs& a, cudaStream_t stream);
// Launches of the NormLogits form that carried MoeRouterArgs::l2_after, by this process.
long long MoeRouterL2AfterLaunches();

// ---- expert weights -------------------------------------------------------------------------
// How an fp8 weight's scale is looked up for element (row r, col c):
//   kTensor: s[0];  kChannel: s[r];  kBlock: s[(r / 128) * ld + c / 128] (ld = ceil(cols/128)).
enum class ScaleMode : uint8_t { kNone, kTensor, kChannel, kBlock };

// One expert's matrices on the device (a table of these is built once per weight set).
struct MoeExpertPtrs {
  const void* gate;  // [inter, hidden]
  const void* up;    // [inter, hidden]
  const void* down;  // [hidden, inter]
  const float* gate_scale;
  const float* up_scale;
  const float* down_scale;
};

// The layout shared by all experts of a set (checked on the host).
struct MoeWeightLayout {
  bool fp8;                      // e4m3 weights (else bf16)
  ScaleMode scale_mode;          // kNone iff !fp8
  int64_t ld_gate, ld_up, ld_down;
  int scale_ld_gu, scale_ld_down;  // kBlock: ceil(hidden/128), ceil(inter/128)
  bool aligned16;                // every expert matrix starts on a 16-byte boundary
};

// ---- route-walking path (small batches; moe_walk.cu) ------------------------------------------
// A token has K = top_k + num_shared slots: its top_k routes (expert ids[t, j], weight
// w[t, j]; ids outside [0, num_experts) are empty) then num_shared shared-expert slots of
// weight 1, slot s covering rows [s * inter, (s + 1) * inter) of the shared gate / up and the
// same columns of the shared down (a shared MLP of inter num_shared * inter). Slot row
// r = t * K + q of `act`.
// Kernel 1, per (slot r, block of inter rows):
//   act[r, i] = silu(gate_r[i] . x[t]) * (up_r[i] . x[t])        (f32; skipped for empty routes)
// Kernel 2, per (token t, block of hidden rows), slots in order q = 0..K-1 (deterministic):
//   out[t, o] = (accumulate ? out[t, o] : 0) + sum_q w[t, q] * (down_q[o] . act[t * K + q])
// top_k = 0 runs the shared slots only (ids / weights unread).
struct MoeWalkArgs {
  const bf16* x;            // [num_tokens, hidden], row stride ldx
  const int32_t* ids;       // [num_tokens, top_k] (self_route: written by kernel 1)
  const float* weights;     // [num_tokens, top_k], row stride ldw_route (likewise)
  const MoeExpertPtrs* experts;  // device table [num_experts]
  MoeWeightLayout layout;
  // Shared expert (num_shared > 0): same dtype / scale mode as `layout`; own strides.
  MoeExpertPtrs shared;
  int num_shared;
  int64_t shared_ld_gate, shared_ld_up, shared_ld_down;
  int shared_scale_ld_gu, shared_scale_ld_down;  // kBlock: ceil(hidden/128), ceil(S*inter/128)
  float* act;               // scratch [num_tokens * K, inter]
  bf16* out;                // [num_tokens, hidden], row stride ldo
  int64_t ldx, ldo, ldw_route;
  int64_t num_tokens;
  int top_k, num_experts, hidden, inter;
  bool accumulate;
  // Tuning (moe_tuning.h): 16-byte loads in flight per lane and row (gate/up: 2 or 4, 0 = auto,
  // moe_walk.cu GateUpUnroll; down: 4 or 8), warps per block (4 or 8), whether kernel 1
  // prefetches the routed experts' down rows into L2.
  int gu_unroll, down_unroll, warps;
  bool prefetch_down;
  // Kernel 1's grid (moe_walk.cu LaunchGateUp): 0 = one block per (slot, kWarps pairs); 1 = the
  // flat form (at most one wave of blocks, items dealt evenly) when that grid exceeds a wave at
  // one token with bf16 experts; 2 = the flat form always. The same act bits in every form.
  // gu_flat_per_sm > 0 caps the flat grid's blocks an SM below what fits (room for the down
  // kernel's blocks beside it).
  int gu_flat, gu_flat_per_sm;
  int phases;  // bit 0: kernel 1, bit 1: kernel 2 (diagnostics; 3 in normal use)
  // Kernel 2's form: 1 = one warp per hidden row (moe_walk.cu DownKernel); 2, 4 or 8 = one
  // block per tile of that many hidden rows (moe_walk_down.cu; vector layouts only).
  int down_rows;
  int down_warps;  // tiled kernel 2: warps per block (4 or 8)
  // Self-routing (top_k > 0, route.num_experts <= 256): kernel 1's blocks route their token
  // from route.logits (moe_route.cuh RouteWarp) instead of reading ids / weights, and the
  // first block of each token's slot 0 stores the routes into ids / weights (which must be
  // route.topk_ids / topk_weights) for kernel 2.
  bool self_route;
  MoeRouterArgs route;
  // Tiled kernel 2 builds its slot table and issues its first weight loads before PdlWait
  // (moe_walk_down.cu kPre: the routes then come from the kernel before kernel 1). Only when
  // kernel 1 runs right before it (phases 3) and triggers after its own wait.
  bool down_preload;
  // Tiled kernel 2 at one token (MoeExpertsParams::l2_after as MakeL2After made it): block i of
  // A asks for share i once its weights have arrived. ptr null: nothing.
  L2After l2_after;
};
void LaunchMoeWalk(const MoeWalkArgs& a, cudaStream_t stream);
// Kernel 2 alone in its tiled form (down_rows >= 2; vector layout, checked by LaunchMoeWalk).
void LaunchMoeWalkDownTiled(const MoeWalkArgs& a, cudaStream_t stream);
// Its launches that carried MoeWalkArgs::l2_after, by this process (tests tell the hint apart).
long long MoeDownL2AfterLaunches();

// ---- expert-sorted path (larger batches; moe_permute.cu, grouped_gemm.cu) -----------------------
// Routes are sorted by expert: position p in [0, routes) holds route sorted_route[p]; expert e
// owns positions [offsets[e], offsets[e + 1]). A tile is (expert, first position, rows <= BM);
// tiles of one launch are listed in `tiles` ([max_tiles][3]), their count in *num_tiles.
struct MoePermuteArgs {
  const int32_t* ids;       // [num_routes] (num_tokens * top_k)
  int32_t* offsets;         // [num_experts + 1]
  int32_t* sorted_route;    // [num_routes] (first offsets[num_experts] valid)
  int32_t* route_pos;       // [num_routes]: position of each route, -1 when empty
  int32_t* tiles;           // [max_tiles * 3]
  int32_t* num_tiles;       // [1]
  int64_t num_routes;
  int num_experts, tile_rows, max_tiles;
};
void LaunchMoePermute(const MoePermuteArgs& a, cudaStream_t stream);

// Grouped GEMM: for each tile, C[p, n] = sum_k A[row(p), k] * B_e[n, k] (B bf16, or fp8
// dequantized with its scales while loaded). Modes:
//   kGateUp: B0 = gate, B1 = up; out (bf16) = silu(A B0^T) * (A B1^T)
//   kPlain:  B0 only; out = A B0^T (f32 or bf16, + bias, accumulate onto out)
// row(p): a_rows ? a_rows[p] / a_row_div : p. Dense (tiles == null): one "expert" given by
// dense_b0/dense_s0, tiles of BM rows over [0, dense_rows).
enum class GemmMode : uint8_t { kGateUp, kPlain };
struct GroupedGemmArgs {
  const bf16* a;            // activations, row stride lda
  const int32_t* a_rows;    // optional gather table (by position)
  int a_row_div;
  const MoeExpertPtrs* experts;  // grouped: device table; field selected by `which`
  int which;                // kPlain, grouped: 0 gate, 1 up, 2 down
  const void* dense_b0;     // dense: weight [N, K]
  const float* dense_s0;    // dense: its scales (fp8)
  MoeWeightLayout layout;   // fp8 / scale mode; ld_b = row stride of B, scale_ld below
  int64_t ld_b, ld_b1;      // row strides of B0 and (kGateUp) B1
  int scale_ld;             // kBlock: ceil(K / 128)
  const int32_t* tiles;     // null: dense
  const int32_t* num_tiles;
  int64_t dense_rows;
  void* out;                // [positions or rows, N], row stride ldo
  bool out_f32;
  int64_t lda, ldo;
  const float* bias;        // optional [N] (kPlain)
  bool accumulate;          // kPlain: out += result
  int K, N;                 // K % 64 == 0, N % 64 == 0
  int max_tiles;            // grid bound (grouped)
  GemmMode mode;
  int tile_rows;            // 16, 32, 64 or 128
};
void LaunchGroupedGemm(const GroupedGemmArgs& a, cudaStream_t stream);

// Weighted un-permute: out[t, c] = (accumulate ? out[t, c] : 0)
//                                  + sum_j w[t, j] * y[route_pos[t * top_k + j], c]  (j ascending)
struct MoeCombineArgs {
  const float* y;           // [positions, hidden] f32
  const int32_t* route_pos; // [num_tokens * top_k], -1: empty route
  const float* weights;     // [num_tokens, top_k], row stride ldw_route
  bf16* out;                // row stride ldo
  int64_t ldo, ldw_route, num_tokens;
  int top_k, hidden;
  bool accumulate;
};
void LaunchMoeCombine(const MoeCombineArgs& a, cudaStream_t stream);

// ---- dense fp8 GEMV (small batches of the fp8 Matmul; fp8_gemv.cu) ---------------------------
// out[r, j] = (accumulate ? out[r, j] : 0) + sum_i x[r, i] * w[j, i] * scale(j, i) (+ bias[j])
struct Fp8GemvArgs {
  const bf16* x;          // [n, k], row stride ldx
  const uint8_t* w;       // [m, k] e4m3, row stride ldw
  const float* scale;     // per scale_mode
  ScaleMode scale_mode;
  int scale_ld;           // kBlock: ceil(k / 128)
  bf16* out;              // [n, m], row stride ldo
  const float* bias;      // optional [m]
  int64_t n, k, m, ldx, ldw, ldo;
  bool accumulate;
  // Fused decode options (ops_fused.h FusedMatmul with fp8 weights): only the ring kernel
  // (gemm/fp8_ring_mma.cu, launched directly) takes them; LaunchFp8Gemv requires them unset.
  //  * norm_weight: x's rows are RMS-normalised first, rounded to bf16 as RmsNorm's output
  //    (staged in shared memory), so x is the norm's input;
  //  * swiglu: w has 2m rows (gate [0, m), up [m, 2m)), scale / bias 2m entries (per row) and
  //    out[r, j] = silu(bf16(y[r, j])) * bf16(y[r, m + j]) rounded to bf16, j < m; no accumulate.
  const void* norm_weight;  // optional [k] of norm_type
  WeightType norm_type;
  float norm_eps;
  bool swiglu;
};
void LaunchFp8Gemv(const Fp8GemvArgs& a, cudaStream_t stream);
// The f32-FMA warp kernel alone (the reference twin of gemv_ring.cu's fp8 path, bitwise).
void LaunchFp8GemvF32(const Fp8GemvArgs& a, cudaStream_t stream);
// LaunchFp8Gemv's kernel choice (fp8_gemv.cu; tests and benchmarks switch it in-process):
// mma = the bf16 tensor-core kernel where the shape allows (k % 64 == 0, aligned rows), else
// the f32-FMA kernel; depth = steps a warp keeps in flight (3, 4 or 6), chunk = KB of a step
// (16 rows x 64·chunk columns, 1 or 2), interleave = a block's split warps walk consecutive
// steps together (else each a contiguous k range), warps_per_sm = the k split's target (more
// warps per 16 rows until the grid has this many an SM), prefetch = steps a warp also
// prefetches into L2 beyond its ring (0: none). Defaults from PEREGRINE_FP8_GEMV_MMA / _DEPTH
// / _CHUNK / _INTERLEAVE / _WARPS_PER_SM / _PREFETCH / _SPLIT / _RING / _RING_PIECE_KB /
// _RING_DEPTH / _RING_STAGE_X / _RING_WARPS / _RING_BLOCKS.
struct Fp8GemvVariant {
  bool mma = true;
  int depth = 4;        // request 2 (H200): d4 interleaved was the fastest on 8 of 10 shapes
  int chunk = 1;        // 2 KB steps were 1.5-2x slower
  bool interleave = true;
  int warps_per_sm = 24;
  int prefetch = 0;
  int split = 0;        // warps sharing 16 rows, forced (1, 2, 4, 8, 16; 0: by the grid, above)
  // The ring tensor-core GEMV (gemm/fp8_ring_mma.cu: a producer warp bulk-copies 16-row
  // tiles into a shared-memory ring, 8 consumer warps run the MMAs): 0 never, 1 wherever it
  // fits, 2 where it measured faster (by shape). ring_piece_kb: KB of one weight row a slot
  // holds (1, 2, 4, 6 or 8; 0: by the plan, fp8_ring_mma.cu); ring_depth: slots (0: by the
  // plan).
  int ring = 2;
  int ring_piece_kb = 0;
  int ring_depth = 0;
  int ring_stage_x = 2;  // x rows staged in shared memory: 0 never (but with the norm), 1
                         // where they fit, 2 by the plan (fp8_ring_mma.cu StageX)
  int ring_warps = 8;    // consumer warps of the ring kernel: 8 or 16
  int ring_blocks = 1;   // 2 (8 warps): blocks of half an SM's shared memory (the next
                         // kernel's block fits beside); 3: and two of them an SM; 4: the
                         // kernel of 2 (<= 96 registers) with one block's shared memory
  // The ring's first round of copies (before the PDL wait) keeps at most this many slots in
  // flight: 0 unpaced; -1 one where that round fills 4 slots or more (fp8_ring_mma.cu).
  int ring_fill_inflight = 0;
};
void SetFp8GemvVariant(const Fp8GemvVariant& v);
Fp8GemvVariant GetFp8GemvVariant();

}  // namespace pg::cuda
