// Host side of the fused decode attention (ops_fused_attention.h RopeKvWriteAttention on CUDA;
// kernel: decode_attention_mma.cu DecodeMmaKernel<..., kFused>, steps in decode_fused.cuh).
// Every row of the batch is its sequence's only new token (q_len 1).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common/device_params.h"

namespace pg::cuda {

// Head dims 64 / 128, GQA group <= 16, bf16 or fp8 e4m3 caches.
bool DecodeFusedSupports(int head_dim, int group, KvType kv_type);
// Keys per active split (AttentionArgs::min_split_keys) of the fused kernel for this shape;
// the caller sets it before DecodeFusedSplits and LaunchDecodeFused.
int DecodeFusedMinSplitKeys(int kv_heads, int64_t max_len);
// The split count for this batch shape (as DecodeAttentionSplits, for the fused kernel's
// block layout: one block per (sequence, kv head, split)).
int DecodeFusedSplits(const AttentionArgs& a, int num_seqs, int64_t max_len);
// Whether a decode batch of num_seqs rows whose longest causal range is max_len keys runs
// faster on the streaming kernel (decode_stream.cu) than on the fused tensor-core kernel (the
// caller then runs LaunchDecodeStreamFused, or RopeKvWrite + Attention where that cannot).
// a: the attention args (shape and cache type).
bool DecodeStreamPreferred(const AttentionArgs& a, int num_seqs, int64_t max_len);
// Where DecodeStreamPreferred: the streaming kernel with the new token's q / k norm, RoPE and
// cache write inside it (one launch + the combine kernel instead of RopeKvWrite + both) when
// the rotation layout and the block allow (PG_DSTREAM_FUSED=0: never, the composition).
// Launch: a as for Attention (a.num_splits from DecodeAttentionSplits, partials attached;
// a.q unused), rope as for LaunchDecodeFused.
bool DecodeStreamFusedSupports(const AttentionArgs& a, const RopeKvWriteArgs& rope);
void LaunchDecodeStreamFused(const AttentionArgs& a, const RopeKvWriteArgs& rope, cudaStream_t stream);
int64_t DecodeStreamFusedLaunches();  // by this process (tests tell the routes apart)
// AttentionArgs::l2_after on LaunchDecodeStreamFused: the share of the hinted bytes its blocks
// ask the L2 for, in percent (0: the hint is dropped); the process default from
// PEREGRINE_ATTN_L2_AFTER_PCT (default 25; tests set it here; returns the previous).
// DecodeStreamL2AfterLaunches: launches that carried the hint.
int SetDecodeStreamL2AfterPct(int pct);
int64_t DecodeStreamL2AfterLaunches();
// One launch: a (attention; a.q unused, a.split_counters required when a.num_splits > 1) and
// rope (the new rows q / kv.k / kv.v as the projection wrote them: read, never modified; the
// cache pointers and scales as a's). max_len: the longest causal range the plan was made for
// (DecodeFusedSplits' max_len; 0: unknown), which picks the kernel variant below — from the
// plan, never from the live lengths, because a captured graph replays at shorter ones.
void LaunchDecodeFused(const AttentionArgs& a, const RopeKvWriteArgs& rope, cudaStream_t stream,
                       int64_t max_len = 0);
// The small-shared-memory variant (one ring stage a warp, 3 or 4 of the 4 warps taking tiles,
// 27-36 KB a block at d 128: two blocks fit on an SM beside a ring GEMV's, so the GEMVs around
// the attention overlap it). Mode: -1 by plan (at most PG_FUSED_SMALL_MAX_TILES tiles a warp at
// any length <= max_len; 3 tile warps where that holds with 3), 0 never, 1 always (tile warps
// by plan), 3 / 4 always with that many tile warps; the process default from PG_FUSED_SMALL (tests set it here; returns
// the previous mode). DecodeFusedSmallLaunches: launches of the variant by this process;
// DecodeFusedLaunches: launches of the fused tensor-core kernel (either variant), so a test can
// tell them from the calls routed to RopeKvWrite + the streaming kernel (DecodeStreamPreferred).
int SetDecodeFusedSmallMode(int mode);
// The fused kernel's latency paths (AttentionArgs::fused_prep_registers): -1 by the rows (on
// where they carry a q / k norm: measured faster there, not without), 0 off, 1 on; the process
// default from PG_FUSED_PREP_REGS (tests force both; returns the previous mode).
int SetDecodeFusedPrepMode(int mode);
int64_t DecodeFusedSmallLaunches();
int64_t DecodeFusedLaunches();
// The small variant's cluster merge (AttentionArgs::cluster_merge: a kv head's <= 16 splits
// merged through distributed shared memory, no partials in global memory): -1 where the
// cluster plan's rule says (decode_fused_plan.cu ClusterPlan), 0 never (nor the plan), 1
// forced wherever the splits fit a cluster; the process default from PG_FUSED_CLUSTER (tests
// set it; returns the previous mode), and the launches that took it.
int SetDecodeFusedClusterMode(int mode);
int64_t DecodeFusedClusterLaunches();
// The small variant's exchange form (decode_xw.cuh: the warps share the softmax and split the
// head dims of P · V instead of merging their outputs): 0 never, 1 wherever every split's
// tiles fit its rings at every length the plan serves, 2 as 1 with the cluster merge's
// partials pushed from registers, 3 as 2 with asynchronous stores that each owner's
// transaction barrier counts (no cluster barrier after the push), -1 (the default) 3 on the
// cluster plan and 0 elsewhere; the process default from PG_FUSED_XW (tests set it; returns
// the previous mode), and the launches that took it.
int SetDecodeFusedXwMode(int mode);
// Launches of the cluster plan's two-stage loop form (decode_fused_plan.cu: plans past 2K keys).
int64_t DecodeFusedClusterLoop2Launches();
// Registers a thread of that loop form's kernel (d 128, bf16, two q rows a warp prepared; -1:
// no device). Its block must fit on an SM beside the o projection's one-row ring GEMV block,
// whose preload overlaps the attention: session 44 measured the kernel at 224 registers, and
// at 226 (the 8-register granule allocates 232) Qwen3-30B-A3B's step took 430-600 µs longer at
// 4K-12K keys (H100, docs/PERF.md "Session 44"), as when a third ring stage left no room
// (session 43). kFusedLoopFormMaxRegisters: the count measured to fit.
int DecodeFusedLoopFormRegisters();
constexpr int kFusedLoopFormMaxRegisters = 224;
// Launches of the cluster plan's rule with more splits than a cluster takes (merged through the
// counter; past kClusterOneSeqMaxKeys for one sequence, see below).
int64_t DecodeFusedClusterCounterLaunches();
// The longest plan, in keys, that one sequence runs on the fused kernel's cluster plan as one
// cluster a kv head (GQA groups 5-8, bf16 caches; PG_FUSED_CLUSTER_MAX_KEYS overrides).
constexpr int64_t kClusterOneSeqMaxKeys = 8192;
// Past it, up to kCounterOneSeqMaxKeys (PG_FUSED_COUNTER_MAX_KEYS overrides; 0: off), one
// sequence of those groups keeps the cluster plan's rule in its counter form: up to 32 splits a
// kv head of >= kCounterSplitKeys keys, merged through the counter, where 32 splits of every kv
// head fit one wave (kv heads x 32 <= SMs; decode_fused_plan.cu ClusterSplitKeys). Past the
// longer of the two, DecodeStreamPreferred takes the streaming kernel.
// DecodeFusedClusterMaxKeys: the longest plan of num_seqs rows the cluster plan takes for a's
// shape, either form (0: none; decode_fused_plan.cu ClusterPlan).
constexpr int64_t kCounterOneSeqMaxKeys = 14336;
constexpr int kCounterSplitKeys = 384;
constexpr int kCounterMaxSplits = 32;
int64_t DecodeFusedClusterMaxKeys(const AttentionArgs& a, int num_seqs);
int64_t DecodeFusedXwLaunches();
int64_t DecodeFusedXwAsyncLaunches();  // of those, cluster launches with the asynchronous push
// Launches of the two-tile plan (decode_fused_plan.cu TwoTilePlan: 128-key splits, two ring
// stages a warp, cluster merge; taken by rule only, never under a forced mode).
int64_t DecodeFusedTwoTileLaunches();

}  // namespace pg::cuda
