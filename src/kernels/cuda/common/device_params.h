// Plain parameter structs of the CUDA kernels (DESIGN.md example 3: device code takes raw
// pointers and one params struct; no framework types). Shared by the .cu device code and the
// host launchers (cuda_register.cpp), which validate and fill them.
//
// Units: every *_stride is in ELEMENTS between consecutive rows (dim 0); the inner dims are
// packed. Activations are bf16; accumulation is f32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace pg::cuda {

using bf16 = __nv_bfloat16;

// ---- elementwise ---------------------------------------------------------------------------
struct AddArgs {  // out = a + b, n elements, all contiguous
  const bf16* a;
  const bf16* b;
  bf16* out;
  int64_t n;
};

struct SwiGluArgs {  // out[r, i] = silu(gate[r, i]) * up[r, i]; up may point into gate's row
  const bf16* gate;
  const bf16* up;
  bf16* out;
  int64_t gate_stride, up_stride, out_stride;
  int64_t rows, inter;
};

enum class WeightType : uint8_t { kF32, kBF16, kF16 };

struct EmbeddingArgs {  // out[t, :] = table[ids[t], :]; bad id -> zeros + *error_flag = 1
  const bf16* table;    // [vocab, hidden], row stride table_stride
  const int32_t* ids;   // [num_tokens]
  bf16* out;            // [num_tokens, hidden], row stride out_stride
  int* error_flag;      // device int, set (never cleared) on an out-of-range id
  int64_t table_stride, out_stride, vocab, hidden, num_tokens;
};

struct RmsNormArgs {
  const bf16* x;        // [rows, hidden]
  bf16* residual;       // optional, updated in place: residual += x, then norm(residual)
  bf16* out;            // [rows, hidden]; may alias x when residual is null
  const void* weight;   // [hidden] of weight_type
  WeightType weight_type;
  int64_t x_stride, residual_stride, out_stride;
  int64_t rows, hidden;
  float eps;
};

// RoPE inverse frequencies travel by value (graph-capture friendly: baked into the launch).
inline constexpr int kMaxRopePairs = 256;  // rotary_dim <= 512
struct RopeArgs {
  bf16* x;                   // [tokens, heads, head_dim], row stride x_stride, in place
  const int32_t* positions;  // [tokens]
  int64_t x_stride, tokens;
  int heads, head_dim, rotary_dim;
  bool neox;
  float inv_freq[kMaxRopePairs];  // [rotary_dim / 2]
};

struct BiasAddArgs {  // out[r, j] += bias[j]
  bf16* out;
  const float* bias;
  int64_t out_stride, rows, cols;
};

// ---- matmul -------------------------------------------------------------------------------
// out[r, j] = (accumulate ? out[r, j] : 0) + sum_i x[r, i] * w[j, i] (+ bias[j])
// Fused decode options (ops_fused.h FusedMatmul; bf16 out, no accumulate, n <= 4, k % 8 == 0):
//  * norm_weight: x's rows are RMS-normalised first (each block stages them in shared memory,
//    rounded to bf16 as RmsNorm's output), so x is the norm's input;
//  * swiglu: w has 2m rows (gate rows [0, m), up rows [m, 2m)), bias 2m entries, and
//    out[r, j] = silu(bf16(y[r, j])) * bf16(y[r, m + j]) rounded to bf16, j < m.
struct GemvArgs {
  const bf16* x;     // [n, k], row stride ldx
  const bf16* w;     // [m, k] ([2m, k] with swiglu), row stride ldw
  bf16* out;         // [n, m], row stride ldo (unused when out_f32 is set)
  const float* bias; // optional [m] ([2m] with swiglu)
  int64_t n, k, m, ldx, ldw, ldo;
  bool accumulate;
  float* out_f32 = nullptr;  // optional f32 output [n, m], row stride ldo (router logits)
  // w holds weights no kernel of the step writes: the kernel streams its first part before
  // the PDL wait (common/pdl.cuh). false: nothing is read before the wait.
  bool w_constant = false;
  const void* norm_weight = nullptr;  // optional [k] of norm_type (fused RMSNorm)
  WeightType norm_type = WeightType::kF32;
  float norm_eps = 1e-5f;
  bool swiglu = false;
};

// ---- paged attention ----------------------------------------------------------------------
// A batch on the device: the arrays of ops::AttentionBatch plus token_seq (the sequence of
// each query row), so kernels never search. Made by DeviceBatchPlan (batch_plan.h).
struct DeviceBatchView {
  const int32_t* q_start = nullptr;     // [num_seqs]
  const int32_t* q_len = nullptr;       // [num_seqs]
  const int32_t* kv_len = nullptr;      // [num_seqs]
  const int32_t* page_start = nullptr;  // [num_seqs]
  const int32_t* token_seq = nullptr;   // [num_tokens]
  const int32_t* page_table = nullptr;  // [page_table_size]
  int num_seqs = 0, num_tokens = 0, page_size = 0;
};

// Element type of a paged KV cache on the device (ops.h KvCacheView: bf16, or fp8 e4m3 holding
// value / scale, saturated to +-448).
enum class KvType : uint8_t { kBF16, kF8E4M3 };

struct KvWriteArgs {
  const bf16* k;  // [num_tokens, kv_heads, head_dim], row stride k_stride
  const bf16* v;
  void* k_cache;  // [num_pages, page_size, kv_heads, head_dim] of kv_type
  void* v_cache;
  KvType kv_type;
  DeviceBatchView batch;
  int64_t k_stride, v_stride;
  int kv_heads, head_dim;
  float inv_k_scale, inv_v_scale;
};

// Fused RoPE + KV write (ops::RopeKvWrite): per token, rotates q's and k's heads in place,
// then writes k (rotated) and v into the token's cache slot (as KvWriteArgs).
struct RopeKvWriteArgs {
  bf16* q;                   // [tokens, heads, head_dim], row stride q_stride, in place
  KvWriteArgs kv;            // k is rotated in place too (its pointer is written through)
  const int32_t* positions;  // [tokens]
  int64_t q_stride;
  int heads, rotary_dim;
  bool neox;
  float inv_freq[kMaxRopePairs];  // [rotary_dim / 2]
  // Optional per-head RMSNorm of q's and k's heads over head_dim before the rotation (Qwen3
  // q_norm / k_norm; both or neither): [head_dim] of norm_type. Rounded to bf16 as RmsNorm's
  // output, so the fused op writes what RmsNorm, RmsNorm, Rope, Rope, KvWrite would.
  const void* q_norm = nullptr;
  const void* k_norm = nullptr;
  WeightType norm_type = WeightType::kF32;
  float norm_eps = 1e-6f;
};

// A hint with no effect on any result: bytes [ptr, ptr + bytes) that a later kernel reads (the
// next GEMV's weights), cut into `slices` equal slices of 16-byte units (that GEMV's blocks, one
// an SM, each read its slice from the front). A kernel near its end asks the L2 for the first
// pct % of some of the slices (bulk_copy.cuh PrefetchL2Share). ptr null: nothing.
struct L2After {
  const char* ptr = nullptr;
  int64_t bytes = 0;
  int slices = 0;
  int pct = 0;
};
// The hint as a kernel takes it: [ptr, ptr + bytes) at pct % (clamped to [0, 100]) of each of
// the current device's SM-count slices, or none (ptr null) where ptr is null or not 16-byte
// aligned, bytes < 16 or pct 0. Defined in context.cpp.
L2After MakeL2After(const void* ptr, int64_t bytes, int pct);

// One launch covers every (query row, kv head, split). A split of a row covers key positions
// [lo + split * chunk, lo + (split + 1) * chunk) of its causal range [lo, pos].
struct AttentionArgs {
  const bf16* q;        // [num_tokens, heads, head_dim], row stride q_stride
  bf16* out;            // [num_tokens, heads, head_dim], row stride out_stride
  const void* k_cache;  // [num_pages, page_size, kv_heads, head_dim] of kv_type
  const void* v_cache;
  KvType kv_type;
  DeviceBatchView batch;
  float* partial_acc;   // [num_tokens, heads, num_splits, head_dim] (num_splits > 1 only)
  float* partial_ml;    // [num_tokens, heads, num_splits, 2]: running max and sum (the decode
                        // kernel keeps its max in log2 units: logits * log2(e))
  int64_t q_stride, out_stride;
  int heads, kv_heads, head_dim;
  int num_splits, chunk;  // chunk: key positions per split (multiple of the tile)
  float logit_scale;      // softmax scale * k_scale
  float v_scale;
  float softcap;          // 0 = none
  int sliding_window;     // 0 = none
  // Rows of sequences with q_len >= this belong to the tensor-core prefill kernel
  // (attention/prefill_attention.h): this kernel skips them. 0 = this kernel does every row.
  int prefill_min_q_len = 0;
  // The decode kernel (decode_attention.cu) already did the rows of q_len-1 sequences.
  bool decode_rows_done = false;
  // Decode kernels with num_splits > 1: per (query row, grid row y) arrival counters, all
  // zero between launches (the last split block of a row merges the splits and resets its
  // counter). Null: a separate combine kernel merges them.
  int* split_counters = nullptr;
  // Decode kernels: a sequence uses ceil(causal length / min_split_keys) of the num_splits
  // splits (at least 1, at most num_splits), decided on the device from its kv_len, so a graph
  // captured (num_splits planned) for a long context costs little at a short one: surplus
  // split blocks exit at once, one active split writes the output itself (no partials).
  int min_split_keys = 16;
  // Splits that fill one wave of resident blocks for this batch shape (0: no cap). A sequence
  // shorter than the plan's full split count uses at most this many (a 1K sequence under a
  // plan for 32K x 8 stays in one wave); a long one uses the plan's count.
  int wave_splits = 0;
  // Decode kernels: the PDL trigger comes after the key loop (measured faster than at the
  // start: 65 vs 72 µs at 32K x 1, the next kernels' blocks no longer wait on the SMs for the
  // whole loop); false: at the start (A/B, PG_DECODE_PDL_LATE=0).
  bool pdl_late_trigger = true;
  // Decode tensor-core kernel, L2 prefetch of cache tiles: >= 0: the first tiles of the ring
  // are prefetched before the PDL wait, and this many tiles beyond the ring ahead of the
  // cp.async copies (more bytes in flight); -1: no prefetch at all.
  int l2_prefetch_tiles = 0;
  // The fused decode kernel's latency paths (decode_fused.cuh): the new token's q / k / v rows
  // go through norm + RoPE in registers with their inputs loaded before the PDL wait
  // (PrepareNewTokenFast, where the rotation layout allows), and a merge of <= 32 splits loads
  // every partial in one round; false: the shared-memory steps. LaunchDecodeFused sets it by
  // the rows (q / k norm) unless PG_FUSED_PREP_REGS says.
  bool fused_prep_registers = true;
  // The last-split-arrives count (decode_common.cuh LastSplitArrives, decode_stream.cu's
  // merge) as one acq_rel atomic of thread 0 between block barriers instead of a fence in
  // every thread (decode launchers set it; PG_SPLIT_RELEASE=0: the fences, A/B). H200,
  // session 12: Llama-3.1-8B 1 x 1K -14 us a step, Qwen3-30B-A3B -20 us.
  bool split_release = false;
  // The fused small decode kernel (decode_attention_mma.cu): a sequence's kv head's splits
  // form one thread-block cluster (num_splits <= 16 blocks along z) that merges its partials
  // through distributed shared memory instead of global partials + an arrival counter
  // (decode_fused_plan.cu ClusterPlan; PG_FUSED_CLUSTER).
  bool cluster_merge = false;
  // With cluster_merge: the byte offset of the merge's inbox in the small variant's shared
  // memory (decode_fused.cuh ClusterMergeSplits; the launcher sets it).
  int cluster_inbox = 0;
  // Streaming decode kernel (decode_stream.cu): the o projection's weights (L2After). Once a
  // block's producer has issued its last cache stage (the ring then holds the block's remaining
  // work and the HBM has little left to do), active split i of the first sequence's A asks for
  // share i of A.
  L2After l2_after;
  // The fused small kernel's exchange form with the cluster merge (decode_xw.cuh): each lane
  // stores its quarter of the split's partial straight into the owners' inboxes instead of
  // through the block's own partial (PG_FUSED_XW=2; decode_fused_plan.cu sets it).
  bool xw_push = false;
  // With xw_push (PG_FUSED_XW=3): the push as st.async, counted on a transaction barrier in
  // each owner's shared memory past the inbox (decode_xw.cuh XwAsyncInit), which the owner
  // waits on instead of the cluster barrier.
  bool xw_async = false;
  // The fused small kernel's two-stage loop form (bf16): K and V halves of each stage as their
  // own cp.async groups, each refilled once its use ends (decode_attention_mma.cu; the cluster
  // plan's loop form sets it unless PG_FUSED_KV_SPLIT=0).
  bool kv_split_ring = false;
};

// ---- launchers (defined in the .cu files; all asynchronous on `stream`) --------------------
void LaunchAdd(const AddArgs& a, cudaStream_t stream);
void LaunchSwiGlu(const SwiGluArgs& a, cudaStream_t stream);
void LaunchEmbedding(const EmbeddingArgs& a, cudaStream_t stream);
void LaunchRmsNorm(const RmsNormArgs& a, cudaStream_t stream);
void LaunchRope(const RopeArgs& a, cudaStream_t stream);
void LaunchBiasAdd(const BiasAddArgs& a, cudaStream_t stream);
void LaunchGemv(const GemvArgs& a, cudaStream_t stream);
// Whether LaunchGemv runs the fused options (norm_weight / swiglu) of `a` (shape, alignment,
// shared memory for the staged rows); the caller falls back to the unfused ops otherwise.
bool GemvFusedSupports(const GemvArgs& a);
void LaunchKvWrite(const KvWriteArgs& a, cudaStream_t stream);
// Returns false when head_dim has no compiled specialisation.
bool AttentionSupportsHeadDim(int head_dim);
void LaunchAttention(const AttentionArgs& a, cudaStream_t stream);
// Decode attention (attention/decode_attention.cu): every row of the batch is its sequence's
// only query (q_len 1). Split-K with the grid's split count fixed by the launcher (graph
// capture); each sequence uses as many of them as its own length needs (AttentionArgs::
// min_split_keys, decided on the device) and spreads its keys over those.
bool DecodeAttentionSupports(int head_dim, int group, KvType kv_type);
// The split count that fills the GPU for this batch shape; max_len: the longest causal range
// (keys) the launch will see (it bounds useful splits at >= min_split_keys keys each).
int DecodeAttentionSplits(const AttentionArgs& a, int num_seqs, int64_t max_len);
void LaunchDecodeAttention(const AttentionArgs& a, cudaStream_t stream);
// Whether LaunchDecodeAttention runs the streaming kernel (attention/decode_stream.cu) for
// the shape of `a` (heads, kv_heads, head_dim, kv_type) under this process's switches (tests
// check that the cases meant for it reach it).
bool DecodeStreamRuns(const AttentionArgs& a);
// The calling thread's zeroed split counters (AttentionArgs::split_counters) for `count`
// entries; allocated (and zeroed) on first use or growth, which is refused (nullptr) while
// `stream` is capturing a graph.
int* DecodeSplitCounters(int64_t count, cudaStream_t stream);
void LaunchRopeKvWrite(const RopeKvWriteArgs& a, cudaStream_t stream);

}  // namespace pg::cuda
