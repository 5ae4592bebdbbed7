// The fused decode attention's plans and launch (ops_fused_attention.h RopeKvWriteAttention on
// the tensor-core kernel, decode_attention_mma.cu kFused): its split count (DecodeFusedSplits,
// which the graph's grid is sized by), the rules that pick a plan for a launch — the cluster
// plan for GQA groups above 4, the two-tile plan for short plans of smaller groups, the small
// shared-memory variant by its tiles a warp — with their A/B modes (decode_fused.h), and
// LaunchDecodeFused. The split planning they build on (ApplyKnobs, PlanSplits, SetWaveSplits)
// is decode_attention.cu's, shared with the unfused kernels (decode_plan.h).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <utility>

#include "core/env.h"
#include "kernels/cuda/attention/decode_common.cuh"
#include "kernels/cuda/attention/decode_fused.h"
#include "kernels/cuda/attention/decode_plan.h"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/device_params.h"

namespace pg::cuda {

using namespace decode;  // kWarps, kSplitGranule, MmaFusedSupports, LaunchMmaFused, PlanSplits

bool DecodeFusedSupports(int head_dim, int group, KvType) {
  return MmaFusedSupports(head_dim, group);
}

// The cluster merge (AttentionArgs::cluster_merge): -1 by ClusterPlan, 0 never, 1 forced
// wherever the small variant's splits fit one cluster (PG_FUSED_CLUSTER; tests set it).
static int& FusedClusterRef() {
  static int mode = EnvInt("PG_FUSED_CLUSTER", -1);
  return mode;
}
int SetDecodeFusedClusterMode(int mode) { return std::exchange(FusedClusterRef(), mode); }

// The small variant's mode (FusedSmall below; SetDecodeFusedSmallMode).
static int& FusedSmallModeRef() {
  static int mode = EnvInt("PG_FUSED_SMALL", -1);
  return mode;
}

// The cluster plan: a grid of splits for 64 keys a split at the planned length (<= 16 splits up
// to 1K keys: one cluster a kv head; above 1K ClusterFit below; DecodeFusedSplits; the device
// still splits a shorter sequence at 32 keys), the small variant with 3 or 4 tile warps
// (ClusterTileWarps), and the cluster merge where the splits fit one cluster (with ClusterFit
// 0, longer plans merge through the counter) — where the GQA group
// is larger than the block's 4 warps (the counter merge's last block takes a head a warp, so two
// rounds of loads there; the cluster merges every head in one round through distributed shared
// memory), for bf16 caches, <= 8 sequences and plans of <= 4096 keys (the range measured; one
// sequence of a group <= 8: <= kClusterOneSeqMaxKeys, session 40, then its counter form to
// kCounterOneSeqMaxKeys, session 41). H200,
// Qwen3-30B-A3B (group 8; docs/PERF.md "Session 17"; step us, without -> with, same call): graph
// captured at 1 x 1K 2772 -> 2723, at 8 x 1K 9961 -> 9827; serving graph sets (2048 / 4096 / 8192
// buckets) one row at 1K / 1.5K / 2K / 3K / 4K keys 2791 / 2872 / 2955 / 3176 / 3231 -> 2781 / 2794
// / 2884 / 3005 / 3089, eight rows equal (why the 64-key splits gain where the counter merges them
// was not analysed); Llama-3.1-8B (group 4) loses with it (+86 us at 1 x 1K), which the rule leaves
// out.
// PG_FUSED_CLUSTER=0 turns off the plan with the merge, PG_FUSED_CLUSTER_PLAN=0 the plan only.
// Whether a's GQA group is at most 2 x kWarps (8): the reach of the two q rows a warp that the
// two-stage forms prepare in registers, and of the measurements above 4K keys / 1K keys a split.
static bool GroupFitsTwoRows(const AttentionArgs& a) {
  return a.kv_heads > 0 && a.heads / a.kv_heads <= 2 * kWarps;
}
// The one-cluster reach for one sequence (PG_FUSED_CLUSTER_MAX_KEYS, A/B).
static int64_t ClusterOneSeqMaxKeys() {
  static const int64_t keys = EnvInt("PG_FUSED_CLUSTER_MAX_KEYS", int(kClusterOneSeqMaxKeys));
  return keys;
}
// Whether a's kv heads each fit kCounterMaxSplits split blocks in one wave (the counter form's
// grid; more splits than a cluster takes).
static bool CounterGridFits(const AttentionArgs& a) {
  return a.kv_heads > 0 && int64_t(a.kv_heads) * kCounterMaxSplits <= MultiprocessorCount();
}
// The counter form's reach for one sequence (decode_fused.h kCounterOneSeqMaxKeys; 0 where its
// grid does not fit one wave, or PG_FUSED_COUNTER_MAX_KEYS=0).
static int64_t CounterOneSeqMaxKeys(const AttentionArgs& a) {
  static const int64_t keys = EnvInt("PG_FUSED_COUNTER_MAX_KEYS", int(kCounterOneSeqMaxKeys));
  return CounterGridFits(a) ? keys : 0;
}
// The longest plan the cluster plan takes (0: none for this shape): for one sequence of a
// group <= 8 the longer of kClusterOneSeqMaxKeys (one cluster a kv head;
// PG_FUSED_CLUSTER_MAX_KEYS overrides, A/B) and the counter form's reach
// (CounterOneSeqMaxKeys; DecodeStreamPreferred sends longer ones to the streaming kernel), 4096
// for batches and for groups above 8 (the range measured).
int64_t DecodeFusedClusterMaxKeys(const AttentionArgs& a, int num_seqs) {
  static const bool plan_env = EnvFlag("PG_FUSED_CLUSTER_PLAN", true);
  if (!plan_env || FusedClusterRef() >= 0 || a.kv_type == KvType::kF8E4M3 || a.kv_heads <= 0)
    return 0;
  if (a.heads / a.kv_heads <= kWarps || num_seqs < 1 || num_seqs > 8) return 0;
  if (num_seqs > 1 || !GroupFitsTwoRows(a)) return 4096;
  return std::max(ClusterOneSeqMaxKeys(), CounterOneSeqMaxKeys(a));
}
// Whether the cluster plan (the rule described above) takes a launch. a: its heads, kv heads
// and cache type; max_len: the length the plan serves (a captured graph replays at shorter
// ones).
static bool ClusterPlan(const AttentionArgs& a, int num_seqs, int64_t max_len) {
  return max_len > 0 && max_len <= DecodeFusedClusterMaxKeys(a, num_seqs);
}

// The cluster plan's grid for plans above 1K keys (PG_FUSED_CLUSTER_FIT, A/B): 0 64-key
// splits at max_len (32 and 64 splits a kv head at 2K and 4K, merged through the counter); 1
// at most kMaxClusterSplits splits (one cluster a kv head, longer splits); 2 (default) as 1,
// and where a split then holds at most 128 keys (plans of <= 2K) the exchange form at two ring
// stages a warp. The device still splits at min_split_keys, so a sequence of <= 1K keys
// replays the 1K plan's 16 splits of <= 64 keys. H100, Qwen3-30B-A3B, µs a step, 0 -> 1 -> 2
// (docs/PERF.md "Session 39", three rounds at 2K): graph at 1 x 2K 3184 -> 3034 -> 2958; the
// engine's graph sets at 1 x 1K / 1.5K / 2K / 3K / 4K 3185 / 3197 / 3194 / 3331 / 3398 -> 2941 /
// 3035 / 3057 / 3158 / 3242 -> 2913 / 2935 / 2958 / 3160 / 3237; 2 / 4 / 8 x 2K 5406 / 7908 /
// 12219 -> 5214 / 7929 / 12206 -> 5009 / 7889 / 12213.
// Groups above 8 (16: Qwen3-235B-A22B's) keep mode 0: not measured, and the two-stage exchange
// form prepares at most 8 q rows in registers.
static int ClusterFit(const AttentionArgs& a) {
  static const int mode = EnvInt("PG_FUSED_CLUSTER_FIT", 2);
  return GroupFitsTwoRows(a) ? mode : 0;
}
// The cluster plan's keys a split for the grid (the host's split count) at max_len: for one
// sequence past the one-cluster reach (DecodeFusedClusterMaxKeys takes such plans only up to
// the counter form's reach) the counter form's >= kCounterSplitKeys keys, at most kCounterMaxSplits
// splits a kv head — more than a cluster's, so the launch merges them through the counter.
// H100, Qwen3-30B-A3B, graph captured at the context, µs a step, the streaming kernel -> 32
// splits through the counter (docs/PERF.md "Session 41", two rounds each): 10K 3656.3 -> 3565.9
// at 384-key splits (3595.9 at 512), 12K 3716.3 -> 3625.6 / 3621.2 (384), 14K 3789.3 -> 3753.2
// (512 keys, 28 splits; 38 splits of 384 lost: 4260.6, a second wave), 16K 3771.9 -> 3920.4
// (512), 8K 3443.2 (one cluster a kv head) -> 3436.0 (256); 4K / 6K lost (+167 / +35). As the
// default (s41b, same call, PG_FUSED_COUNTER_MAX_KEYS=0 -> default): graph at 8.5K / 10K / 12K
// 3563.4 / 3613.1 / 3672.7 -> 3488.7 / 3531.4 / 3585.5; the engine's graph sets (with the
// 12288-key set) at 8.5K / 10K / 12K 3565.2 / 3605.4 / 3661.6 -> 3441.3 / 3494.6 / 3592.4;
// the reach at 14336 with a 14336-key set instead (knobs, three rounds): 10K / 12K / 13K / 14K
// 3482.6 / 3572.7 / 3687.8 / 3720.7 -> 3489.5 / 3580.4 / 3651.5 / 3710.0; as the default
// (session 42, three rounds): 13K / 14K 3726.3 / 3762.5 -> 3685.9 / 3742.3, 8.5K-12K within 5.
static int ClusterSplitKeys(const AttentionArgs& a, int num_seqs, int64_t max_len) {
  if (ClusterFit(a) == 0) return 64;
  if (num_seqs == 1 && max_len > ClusterOneSeqMaxKeys())
    return int(std::max<int64_t>(kCounterSplitKeys, SplitChunk<int64_t>(max_len, kCounterMaxSplits)));
  return int(std::max<int64_t>(64, SplitChunk<int64_t>(max_len, kMaxClusterSplits)));
}

// The two-tile plan: splits of 128 keys, the small variant with 4 tile warps and two ring
// stages a warp (each warp's two 16-key tiles load before PdlWait), merged in a thread-block
// cluster — where the GQA group fits the block's 4 warps (the cluster plan's rule takes the
// larger groups), d 128, bf16 caches, plans of <= 1024 keys (<= 8 splits: one cluster a kv
// head) whose blocks fit one wave beside the qkv ring GEMV (sequences x kv heads x splits <=
// SMs: every block resident before the projection ends, none starting after it as the 32-key
// plan's second half does). Its tile loop is half the code since the fused kernel dropped the
// softcap, so a cold SM runs it at the warm pace. H200, Llama-3.1-8B, graph captured at 1 x 1K
// (docs/PERF.md "Session 18", same call, two rounds): 3969.5 / 3968.9 -> 3922.6 / 3937.3 us a
// step (89.7 -> 90.8% of the floor; the plan off, the rest of the change equal to before:
// 3968.7 / 3970.7). 16 splits (plans of 2048 keys) lost: graph at 1 x 2K equal, the engine's
// 2048-key graph set at 1 x 1K +102 us (a cluster's surplus blocks hold their SMs through its
// barriers), so the engine's graph sets (2048 keys and up) never take it.
// PG_FUSED_TWO_TILE=0 turns it off; tests forcing a variant or the cluster mode leave it out.
static int& TwoTileRef() {
  static int mode = EnvInt("PG_FUSED_TWO_TILE", -1);
  return mode;
}
// Whether a plan's grid is one wave of one block an SM (sequences x kv heads x splits blocks):
// every block resident before the projection before it ends, one beside its ring GEMV block.
static bool OneBlockAnSm(int num_seqs, int kv_heads, int64_t splits) {
  return int64_t(num_seqs) * kv_heads * splits <= MultiprocessorCount();
}
constexpr int kTwoTileKeys = 128;    // keys a split, on the host and the device
constexpr int kTwoTileMaxSplits = 8;  // plans of <= 1024 keys
static std::atomic<int64_t> g_two_tile_launches{0};
static bool TwoTilePlan(const AttentionArgs& a, int num_seqs, int64_t max_len) {
  if (TwoTileRef() == 0 || FusedClusterRef() >= 0 || FusedSmallModeRef() >= 0) return false;
  if (a.kv_type != KvType::kBF16 || a.head_dim != 128 || a.kv_heads <= 0 || max_len <= 0) return false;
  const int64_t splits = (max_len + kTwoTileKeys - 1) / kTwoTileKeys;
  return a.heads / a.kv_heads <= kWarps && splits <= kTwoTileMaxSplits &&
         OneBlockAnSm(num_seqs, a.kv_heads, splits);
}
int64_t DecodeFusedTwoTileLaunches() { return g_two_tile_launches.load(std::memory_order_relaxed); }

// The cluster plan's tile warps: 4 where its grid is one wave of one block an SM (a 64-key
// split is then one tile a warp, and a 4-warp ring block fits beside the qkv ring GEMV's),
// else 3 (two of the smaller blocks fit an SM beside the ring; the fourth warp shares the
// preparation and the merges). H200, Qwen3-30B-A3B (docs/PERF.md "Session 19", same call,
// 4 vs 3 tile warps everywhere): graph captured at 1 x 1K 2592 / 2578 vs 2627 / 2636 us a
// step; serving sets 1 x 1K / 2K (2048-key set, 128 blocks) 2719 / 2784 vs 2729 / 2840, 8 rows
// (512+ blocks) +10 to +22 us, which this rule leaves at 3.
static int ClusterTileWarps(int num_seqs, int kv_heads, int num_splits) {
  return OneBlockAnSm(num_seqs, kv_heads, num_splits) ? 4 : 3;
}

// The plan a rule picks for a fused launch (the two exclude each other by the GQA group), read
// by the split count (DecodeFusedSplits) and by the launch (LaunchDecodeFused) alike, so the
// grid and the device agree.
enum class FusedRule { kNone, kCluster, kTwoTile };
static FusedRule FusedRuleOf(const AttentionArgs& a, int num_seqs, int64_t max_len) {
  if (ClusterPlan(a, num_seqs, max_len)) return FusedRule::kCluster;
  if (TwoTilePlan(a, num_seqs, max_len)) return FusedRule::kTwoTile;
  return FusedRule::kNone;
}

// The fused kernel's keys per active split, from the model-step A/B grids (H200, docs/PERF.md
// "Single-kernel decode attention", "Decode attention keys per split, session 5" and "Fused
// decode attention latency paths, session 7"): 32 (Llama-3.1-8B 1K x 1: 4510 us per step at 16
// vs 5000 at 64, then 4255-4258 at 32 vs 4296-4301 at 16, equal at 8 x 1K and at 32K;
// Qwen3-30B-A3B 1K x 1: 2992 at 32 vs 2995 at 64 with the shared-memory merge, and with the
// one-round merge of <= 32 splits 2920-2925 vs 2971-2980 at 64, three runs each, equal at 4
// and 8 rows). Not by length: a captured graph replays its plan at every shorter length. (fp8
// at 8 x 32K with 16 keys per split: 13452 vs 11827 us at 64 — the CUDA registration leaves
// that shape to the unfused kernels.) The host plan and the device args must use the same
// value (RunFusedAttention sets it in both).
int DecodeFusedMinSplitKeys(int /*kv_heads*/, int64_t /*max_len*/) { return 32; }

// The fused kernel's A/B knobs over the decode kernel's (ApplyKnobs): PG_FUSED_MIN_SPLIT_KEYS
// (keys per active split), PG_FUSED_PREP_REGS (0 / 1: the new token's preparation and the
// few-split merge through shared memory / in registers; default by the rows, LaunchDecodeFused),
// PG_FUSED_PDL_LATE (1: PDL trigger after the key loop; default 0,
// at the start: the next kernel streams its weights during the attention, measured 6146 vs
// 6894 us per Llama-3.1-8B step at 32K x 1 and equal or better in every other cell).

static AttentionArgs FusedKnobs(const AttentionArgs& args) {
  static const int min_keys = EnvInt("PG_FUSED_MIN_SPLIT_KEYS", 0);
  static const int late = EnvInt("PG_FUSED_PDL_LATE", 0);
  AttentionArgs a = args;
  ApplyKnobs(a);
  a.cluster_merge = FusedClusterRef() == 1;
  if (min_keys > 0) a.min_split_keys = min_keys;
  a.pdl_late_trigger = late != 0;
  return a;
}

int DecodeFusedSplits(const AttentionArgs& a, int num_seqs, int64_t max_len) {
  AttentionArgs k = FusedKnobs(a);
  switch (FusedRuleOf(a, num_seqs, max_len)) {
    case FusedRule::kCluster:
      // The grid is sized for 64-key splits at max_len (ClusterSplitKeys: longer ones above 1K
      // keys, one cluster a kv head); the device still splits at min_split_keys, so a sequence
      // of up to (splits x min_split_keys) keys replays the usual 32-key splits and a longer one
      // fills the grid with longer splits.
      k.min_split_keys = std::max(k.min_split_keys, ClusterSplitKeys(a, num_seqs, max_len));
      break;
    case FusedRule::kTwoTile: k.min_split_keys = kTwoTileKeys; break;  // the device's too
    case FusedRule::kNone: break;
  }
  return PlanSplits(k, num_seqs, max_len, /*fused=*/true);
}

// The small-shared-memory variant (decode_fused.h): mode from PG_FUSED_SMALL (-1 / unset: by
// plan, 0 off, 1 on, 3 / 4 on with that many tile warps) unless a test set it; "by plan" takes
// it when no warp of a 4-warp split block gets more than PG_FUSED_SMALL_MAX_TILES (default 1)
// 16-key tiles at any length the plan serves, and 3 tile warps when those do not either
// (smaller blocks: two fit beside the 173 KB ring GEMV, gemv_ring.cu) — and only when the
// plan's grid at max_len has at least PG_FUSED_SMALL_MIN_BLOCKS blocks (default: one per two
// SMs). Measured (docs/PERF.md "Decode attention beside the ring GEMVs"): Llama-3.1-8B 1K x 1
// (256 blocks) 4118-4130 vs 4204-4212 us a step; Qwen3-30B-A3B 1K x 1 (64 blocks on 132 SMs,
// its qkv on the warp GEMV, whose blocks leave no room) 3049-3051 vs 2974 us. Since session 9
// that qkv (5120 x 2048 + norm) takes the ring GEMV (gemv_ring.cu ShapeWantsRing), beside
// which the small blocks fit and load their keys early: 128 blocks at 1K and 2K (the default
// was one per SM then: 132). Both changes, Qwen3-30B-A3B b1: 2913-2915 vs 2957-2960 us at 1K,
// 2927-2928 vs 3012-3013 us in the 2048-key graph set serving replays (docs/PERF.md
// "session 9").
// SetDecodeFusedPrepMode: -1 by the rows (LaunchDecodeFused), 0 / 1 forced.
static int& FusedPrepModeRef() {
  static int mode = EnvInt("PG_FUSED_PREP_REGS", -1);
  return mode;
}
int SetDecodeFusedPrepMode(int mode) { return std::exchange(FusedPrepModeRef(), mode); }


// The most cache keys one split block gets at any causal length n <= max_len under the plan in
// `a` (num_splits, min_split_keys, wave_splits): ActiveSplits / SplitOf of decode_common.cuh
// replayed on the host, since a graph captured at max_len replays at every shorter length.
// chunk(n) is at most round16(min(n, min_split_keys)) while a sequence uses one split per
// min_split_keys keys, and grows with n once the cap binds (wave_splits below 8 *
// num_splits * min_split_keys keys, num_splits above): the three candidates bound it.
static int64_t WorstSplitKeys(const AttentionArgs& a, int64_t max_len) {
  const int64_t msk = std::max(1, a.min_split_keys), splits = a.num_splits;
  auto chunk_at = [&](int64_t n) {
    int64_t cap = splits;
    if (a.wave_splits > 0 && n < splits * 8 * msk) cap = std::min<int64_t>(cap, a.wave_splits);
    const int64_t active = std::max<int64_t>(1, std::min(cap, (n + msk - 1) / msk));
    return SplitChunk(n, active);
  };
  max_len = std::max<int64_t>(1, max_len);
  return std::max({chunk_at(max_len), chunk_at(std::clamp<int64_t>(splits * 8 * msk - 1, 1, max_len)),
                   chunk_at(std::min(max_len, msk))});
}

// Tile warps of the small variant (3 or 4), or 0: the 3-stage kernel.
static int FusedSmall(const AttentionArgs& a, int64_t max_len) {
  static const int max_tiles = std::max(1, EnvInt("PG_FUSED_SMALL_MAX_TILES", 1));
  static const int min_blocks = EnvInt("PG_FUSED_SMALL_MIN_BLOCKS", (MultiprocessorCount() + 1) / 2);
  const int mode = FusedSmallModeRef();
  if (mode == 0 || (mode < 0 && max_len <= 0)) return 0;  // off, or no plan length
  if (mode == 3 || mode == 4) return mode;
  if (mode < 0) {  // the plan's blocks at max_len (ActiveSplits of decode_common.cuh)
    const int64_t msk = std::max(1, a.min_split_keys);
    int64_t cap = a.num_splits;
    if (a.wave_splits > 0 && max_len < int64_t(a.num_splits) * 8 * msk)
      cap = std::min<int64_t>(cap, a.wave_splits);
    const int64_t active = std::max<int64_t>(1, std::min(cap, (max_len + msk - 1) / msk));
    if (int64_t(a.batch.num_seqs) * a.kv_heads * active < min_blocks) return 0;
  }
  const int64_t tiles = (WorstSplitKeys(a, std::max<int64_t>(1, max_len)) + 15) / 16;
  if ((tiles + 2) / 3 <= max_tiles) return 3;
  return mode > 0 || (tiles + 3) / 4 <= max_tiles ? 4 : 0;
}

int SetDecodeFusedSmallMode(int mode) { return std::exchange(FusedSmallModeRef(), mode); }

// The small variant's exchange form (decode_xw.cuh; decode_fused.h SetDecodeFusedXwMode):
// 0 never, 1 wherever the plan puts at most tile warps x stages tiles in a split at every
// length it serves (WorstSplitKeys), so that the kernel never falls back to its loop; bf16
// caches; 2 as 1, with the cluster merge's partials stored from registers
// (AttentionArgs::xw_push); 3 as 2, the stores asynchronous and counted on each owner's
// transaction barrier instead of a cluster barrier (AttentionArgs::xw_async).
// -1 (the default): 3 for the cluster plan, 0 for the others. Session 31, H200, batch 1 x 1K,
// three interleaved rounds (docs/PERF.md): Qwen3-30B-A3B (cluster plan) 2486.8 with 3 vs
// 2514.1 us a step with 0 (2 alone: 2506.6); Llama-3.1-8B (two-tile plan) 3914.0 vs 3877.7.
static int& FusedXwRef() {
  static int mode = EnvInt("PG_FUSED_XW", -1);
  return mode;
}
static int FusedXwMode(FusedRule rule) {
  const int mode = FusedXwRef();
  return mode >= 0 ? mode : rule == FusedRule::kCluster ? 3 : 0;
}
int SetDecodeFusedXwMode(int mode) { return std::exchange(FusedXwRef(), mode); }
static std::atomic<int64_t> g_xw_launches{0};
int64_t DecodeFusedXwLaunches() { return g_xw_launches.load(std::memory_order_relaxed); }
static bool XwApplies(const AttentionArgs& a, int64_t max_len, int small, int stages, int mode) {
  if (mode < 1 || small == 0 || a.kv_type != KvType::kBF16) return false;
  return WorstSplitKeys(a, std::max<int64_t>(1, max_len)) <= int64_t(small) * stages * kSplitGranule;
}

static std::atomic<int64_t> g_small_launches{0}, g_fused_launches{0}, g_loop2_launches{0},
    g_counter_launches{0};
int64_t DecodeFusedClusterLoop2Launches() { return g_loop2_launches.load(std::memory_order_relaxed); }
int64_t DecodeFusedClusterCounterLaunches() { return g_counter_launches.load(std::memory_order_relaxed); }
int64_t DecodeFusedSmallLaunches() { return g_small_launches.load(std::memory_order_relaxed); }
int64_t DecodeFusedLaunches() { return g_fused_launches.load(std::memory_order_relaxed); }

void LaunchDecodeFused(const AttentionArgs& args, const RopeKvWriteArgs& rope, cudaStream_t stream,
                       int64_t max_len) {
  if (args.batch.num_seqs == 0) return;
  AttentionArgs pre = args;
  // The register paths where the new rows carry a per-head q / k norm (Qwen3: its old steps
  // were five barriers and three load rounds long) or at one sequence; other rows keep the
  // old steps (session 7, H200, three interleaved runs each: Qwen3-30B-A3B 1K x 1 / 4 / 8
  // -118 / -115 / -40 us a step; Llama-3.1-8B 1K x 8 +61, 1K x 1 -9, 4K x 1 -22 us; session 10,
  // Llama-3.1-8B 1K x 1, two rounds: 4064.2 / 4065.5 vs 4080.1 / 4075.9 us).
  // PG_FUSED_PREP_REGS=0/1 overrides.
  const int prep = FusedPrepModeRef();
  pre.fused_prep_registers =
      prep >= 0 ? prep != 0 : rope.q_norm != nullptr || args.batch.num_seqs == 1;
  AttentionArgs a = FusedKnobs(pre);
  const FusedRule rule = FusedRuleOf(a, a.batch.num_seqs, max_len);
  const bool two_tile = rule == FusedRule::kTwoTile;
  if (two_tile) a.min_split_keys = kTwoTileKeys;
  a.cluster_merge = a.cluster_merge || rule != FusedRule::kNone;
  SetWaveSplits(a, /*fused=*/true);
  // Tile warps: the two-tile plan's 4; the cluster plan's (ClusterTileWarps) unless a mode is
  // forced.
  const bool cluster_small = rule == FusedRule::kCluster && FusedSmallModeRef() < 0;
  const int small = two_tile        ? 4
                    : cluster_small ? ClusterTileWarps(a.batch.num_seqs, a.kv_heads, a.num_splits)
                                    : FusedSmall(a, max_len);
  if (two_tile) g_two_tile_launches.fetch_add(1, std::memory_order_relaxed);
  if (rule == FusedRule::kCluster && a.num_splits > kMaxClusterSplits)
    g_counter_launches.fetch_add(1, std::memory_order_relaxed);
  g_fused_launches.fetch_add(1, std::memory_order_relaxed);
  if (small) g_small_launches.fetch_add(1, std::memory_order_relaxed);
  static const bool log = EnvFlag("PG_FUSED_SMALL_LOG", false);
  static int64_t last_logged = -1;  // (variant, splits, max_len) of the last line: one a change
  const int64_t key = (max_len * 512 + a.num_splits) * 8 + small;
  if (log && key != std::exchange(last_logged, key))
    std::fprintf(stderr, "fused attention: %s variant (%d tile warps), %d splits, max_len %lld, worst keys a split %lld\n",
                 small ? "small" : "3-stage", small ? small : kWarps, a.num_splits, (long long)max_len,
                 (long long)WorstSplitKeys(a, max_len));
  const int xw_mode = FusedXwMode(rule);
  // The cluster plan (cluster_small: its rule, no forced mode) at 4 tile warps, a group <= 8,
  // where the one-stage exchange form does not take every split the plan serves: two stages,
  // in the exchange form where that then takes them (ClusterFit 2: fit2), else in the loop
  // form (loop2) — two q rows a warp prepared in registers either way
  // (PG_FUSED_CLUSTER_STAGES=1: the loop form at one stage, as before session 40; A/B). H100,
  // Qwen3-30B-A3B, µs a step, one -> two stages (docs/PERF.md "Session 40", two rounds): graph
  // at 1 x 3K / 4K 3167.7 / 3252.3 -> 3100.6 / 3181.1, 2 x 3K / 4K 5417.0 / 5565.3 -> 5317.4 /
  // 5432.8; the engine's 4096-key set at 3K / 4K 3184.5 / 3254.1 -> 3116.0 / 3182.1.
  static const int cluster_stages = EnvInt("PG_FUSED_CLUSTER_STAGES", 2);
  const bool past_one_stage = cluster_small && small == 4 && GroupFitsTwoRows(a) &&
                              !XwApplies(a, max_len, small, 1, xw_mode);
  const bool fit2 = past_one_stage && ClusterFit(a) == 2 && XwApplies(a, max_len, small, 2, xw_mode);
  const bool loop2 = past_one_stage && cluster_stages == 2 && !fit2;
  const int stages = two_tile || fit2 || loop2 ? 2 : 1;
  const bool xw = XwApplies(a, max_len, small, stages, xw_mode);
  if (loop2 && !xw) g_loop2_launches.fetch_add(1, std::memory_order_relaxed);
  if (xw) g_xw_launches.fetch_add(1, std::memory_order_relaxed);
  // The loop form's split ring (decode_attention_mma.cu; PG_FUSED_KV_SPLIT=0: one cp.async
  // group a stage, A/B). H100, Qwen3-30B-A3B, µs a step, two rounds (docs/PERF.md "Session
  // 44"): 1 x 4K 3192.7 / 3191.7 -> 3154.1 / 3160.5, 1 x 8K 3447.4 / 3443.7 -> 3412.4 / 3407.4.
  static const bool kv_split = EnvFlag("PG_FUSED_KV_SPLIT", true);
  a.kv_split_ring = kv_split && loop2 && !xw;  // (loop2: two stages)
  a.xw_push = xw && xw_mode >= 2;
  a.xw_async = xw && xw_mode == 3;
  LaunchMmaFused(a, rope, a.batch.num_seqs, small, stages, xw, stream);
}

}  // namespace pg::cuda
