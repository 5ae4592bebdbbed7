// Process-wide knobs of the CUDA MoE experts path choice (moe_register.cpp), for benchmarks
// and tests: force the route-walking or the expert-sorted path, or a grouped-GEMM tile height.
// Set them before running ops, not while other threads run them.
#pragma once

namespace pg::cuda {

enum class MoePath : int { kAuto, kWalk, kSorted };
struct MoeTuning {
  MoePath path = MoePath::kAuto;
  int tile_rows = 0;         // 0 = auto (by routes per touched expert), else 16/32/64/128
  int walk_max_tokens = 4;   // kAuto: batches of at most this many tokens walk their routes
  // kAuto, fp8 weights: walk up to this many tokens (H200, DeepSeek-V3 fp8 layer: walk 713 vs
  // sorted 1067 us at 8 tokens, 2721 vs 3081 at 32; bf16 V2-Lite: sorted faster from 8).
  int walk_max_tokens_fp8 = 32;
  // Route-walking kernels (moe_walk.cu): 16-byte loads in flight per lane and row in the
  // gate/up kernel (2 or 4; 0 = auto, moe_walk.cu GateUpUnroll: 4 for fp8 weights, 2 for bf16
  // — H200, one token: DeepSeek-V3 fp8 shape 103 vs 110 us, Qwen3 bf16 29 vs 25 us — except 4
  // where bf16's one-token grid goes flat) and the one-warp-per-row down
  // kernel (4 or 8; 0 = auto: 8 when tokens x hidden
  // <= 2048, measured faster there on the H200, else 4); warps per block of the gate/up kernel
  // (4 or 8; 0 = auto: 8 for bf16 weights at one token, else 4 — H200: 4 equal at one token,
  // faster at 2-4; H100, Qwen3-30B-A3B 1 x 1K: 8 faster by 17-22 us a step in two calls, 2-4
  // tokens equal, DeepSeek-V2-Lite equal; docs/PERF.md "Session 32"); the gate/up
  // kernel prefetches the routed experts' down rows into L2 when they total at most
  // walk_prefetch_bytes (0: never; measured no faster). walk_phases (diagnostics: bit 0 runs
  // the gate/up kernel, bit 1 the down kernel) times one kernel alone.
  int walk_gu_unroll = 0;
  // The gate/up kernel's grid (MoeWalkArgs::gu_flat): 0 one block per (slot, warps' pairs); 1
  // (default) at most one wave with the pairs dealt evenly where the other grid is larger, at one
  // token with bf16 experts; 2 always. H100, 1 x 1K, three / two rounds (docs/PERF.md "Session
  // 35"): DeepSeek-V2-Lite 2220.0 -> 2170.5 us a step, Moonlight-16B-A3B 2317.6 -> 2252.2; where
  // 1 leaves the per-slot grid, the flat one lost: Qwen3-30B-A3B 2 / 4 tokens +148 / +202 us,
  // DeepSeek-V3's fp8 shape (5 layers) 1 / 4 tokens +6 / +130.
  int walk_gu_flat = 1;
  int walk_gu_flat_per_sm = 0;  // > 0: the flat grid's blocks an SM, capped (0: what fits)
  int walk_down_unroll = 0;
  int walk_warps = 0;
  long long walk_prefetch_bytes = 0;
  int walk_phases = 3;
  // Down kernel form: 1 = one warp per hidden row; 2, 4, 8 = one block per tile of that many
  // hidden rows, each act chunk read once for the tile's rows (moe_walk_down.cu); 0 = auto:
  // 8 for fp8 weights, 4 for bf16 (H200, one token, down kernel alone: DeepSeek-V3 fp8 shape
  // 35 / 44 / 77 us at 8 / 4 / 1 rows; Qwen3 bf16 10.0 / 9.9 / 14.6 us).
  int walk_down_rows = 0;
  int walk_down_warps = 4;  // warps per block of the tiled down kernel (4 or 8)
  // MoeExpertsParams::route on the walking path: the gate/up kernel routes for itself (the
  // router kernel, if any, only computes logits); false: the router runs as kernels first —
  // with a router matmul (no residual) the fused kernel computes only the logits (+ normed
  // rows) and the logits form routes, else MoeRouter's kernel (the models' one-token decode
  // passes a route by default; gate/up routing measured slower there, moe_device.cpp).
  bool walk_self_route = false;
  // The tiled down kernel routes / reads its routes and issues its first weight loads before
  // its PDL wait, overlapping the gate/up kernel's tail (moe_walk_down.cu kPre). H200, one
  // token: DeepSeek-V2-Lite step 2284 -> 2161 us, Moonlight 2357 -> 2255 us.
  bool walk_down_preload = true;
  // MoeExpertsParams::l2_after at one token on the tiled down kernel: the share of each of the
  // hinted weights' slices its blocks ask the L2 for, in percent (0: the hint is dropped).
  // H200, Qwen3-30B-A3B 1 x 1K with the next layer's qkv: 2545 -> 2527 us a step at 25 %
  // (12 %: -10, 50 %: +11, 100 %: +97); DeepSeek-V2-Lite slower at every share (its models
  // pass no hint). docs/PERF.md, session 27.
  int walk_l2_after_pct = 25;
  // The same hint taken earlier, by the router's NormLogits kernel right after its PDL wait
  // (MoeRouterArgs::l2_after; the HBM idles through the routing): its share in percent, 0 off
  // (the default until measured).
  int walk_router_l2_pct = 0;
  // Diagnostics only (wrong results; for timings by difference in a whole step): the one-token
  // routing inside MoeExperts skips its logits-form router kernel (bit 0: the walk reads stale
  // routes) and / or NormLogitsKernel (bit 1: stale logits and normed rows).
  int walk_skip_route = 0;
};
void SetMoeTuning(const MoeTuning& t);
const MoeTuning& GetMoeTuning();

}  // namespace pg::cuda
