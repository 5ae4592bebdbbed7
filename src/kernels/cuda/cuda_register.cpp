// CUDA launchers (validate dtypes/devices, fill the params structs, pick a specialisation)
// and their registry entries. Every op runs on the calling thread's current stream
// (common/context.h) and is asynchronous, except Embedding's id check outside graph capture
// (it reads the kernel's error flag back, a synchronisation).
//
// Capabilities (the `supports` predicates): activations, outputs and caches bf16 on the
// device (Matmul may also write f32: router logits); Matmul weights bf16; RmsNorm weights
// f32/bf16/f16; Embedding tables bf16.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/env.h"
#include "core/log.h"
#include "kernels/cuda/attention/decode_fused.h"
#include "kernels/cuda/attention/prefill_attention.h"
#include "kernels/cuda/batch_plan.h"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/device_params.h"
#include "kernels/cuda/gemm/fp8_ring_mma.h"
#include "kernels/cuda/gemm/matmul_lt.h"
#include "kernels/registry.h"
#include "kernels/rope_freq.h"

namespace pg::ops {
namespace {

using cuda::bf16;

// Batches of at most this many rows use the GEMV kernels (memory bound: they stream the
// weight once per 8 rows; at 2-4 rows the tensor-core ring GEMV, fp8_ring_mma.h); larger ones
// go to cuBLASLt, unless Bf16RingMmaMode::kOn forces the ring kernel up to 8 rows (A/B).
// Chosen from tools/gpu/cuda_check.sh's and bench_gemv's tables.
constexpr int64_t kGemvMaxRows = 4;

bool DevBf16(const TensorView& t) { return t.device == Device::kCuda && t.dtype == DType::kBF16; }
bf16* Bf(const TensorView& t) { return static_cast<bf16*>(t.data); }
// A paged KV cache tensor the CUDA kernels read and write: bf16 or fp8 e4m3 on the device.
bool DevKv(const TensorView& t) {
  return t.device == Device::kCuda && (t.dtype == DType::kBF16 || t.dtype == DType::kF8E4M3);
}
cuda::KvType KvTypeOf(const KvCacheView& c) {
  return c.k_cache.dtype == DType::kF8E4M3 ? cuda::KvType::kF8E4M3 : cuda::KvType::kBF16;
}

void CheckLaunch() { PG_CUDA_CHECK_LAUNCH(); }

// ---- Add / SwiGlu / Embedding / RmsNorm / Rope ---------------------------------------------
void RunAdd(const AddParams& p) {
  cuda::LaunchAdd({Bf(p.a), Bf(p.b), Bf(p.out), p.out.numel()}, cuda::CurrentStream());
  CheckLaunch();
}

void RunSwiGlu(const SwiGluParams& p) {
  const int64_t inter = p.out.dim(1);
  cuda::SwiGluArgs a{};
  a.gate = Bf(p.gate);
  a.gate_stride = p.gate.strides[0];
  a.up = p.up.data ? Bf(p.up) : Bf(p.gate) + inter;
  a.up_stride = p.up.data ? p.up.strides[0] : p.gate.strides[0];
  a.out = Bf(p.out);
  a.out_stride = p.out.strides[0];
  a.rows = p.out.dim(0);
  a.inter = inter;
  cuda::LaunchSwiGlu(a, cuda::CurrentStream());
  CheckLaunch();
}

void RunEmbedding(const EmbeddingParams& p) {
  cudaStream_t stream = cuda::CurrentStream();
  const bool check = !cuda::IsCapturing(stream);
  int* flag = static_cast<int*>(cuda::Scratch(cuda::ScratchSlot::kErrorFlag, sizeof(int)));
  if (check) PG_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), stream));
  cuda::EmbeddingArgs a{Bf(p.table), p.ids.as<int32_t>(), Bf(p.out), flag, p.table.strides[0],
                        p.out.strides[0], p.table.dim(0), p.table.dim(1), p.ids.dim(0)};
  cuda::LaunchEmbedding(a, stream);
  CheckLaunch();
  if (check) {
    // Inside a graph the ids were checked on the host when they were tokenized/sampled.
    int bad = 0;
    PG_CUDA_CHECK(cudaMemcpyAsync(&bad, flag, sizeof(int), cudaMemcpyDeviceToHost, stream));
    PG_CUDA_CHECK(cudaStreamSynchronize(stream));
    PG_ENSURE(bad == 0, kOutOfRange, "Embedding: a token id is outside vocab [0, {})",
              p.table.dim(0));
  }
}

cuda::WeightType WeightTypeOf(DType t) {
  return t == DType::kBF16 ? cuda::WeightType::kBF16
                           : (t == DType::kF16 ? cuda::WeightType::kF16 : cuda::WeightType::kF32);
}

void RunRmsNorm(const RmsNormParams& p) {
  cuda::RmsNormArgs a{};
  a.x = Bf(p.x);
  a.residual = p.residual.data ? Bf(p.residual) : nullptr;
  a.out = Bf(p.out);
  a.weight = p.weight.data;
  a.weight_type = WeightTypeOf(p.weight.dtype);
  a.x_stride = p.x.strides[0];
  a.residual_stride = p.residual.data ? p.residual.strides[0] : 0;
  a.out_stride = p.out.strides[0];
  a.rows = p.x.dim(0);
  a.hidden = p.x.dim(1);
  a.eps = p.eps;
  cuda::LaunchRmsNorm(a, cuda::CurrentStream());
  CheckLaunch();
}

void RunRope(const RopeParams& p) {
  cuda::RopeArgs a{};
  a.x = Bf(p.x);
  a.positions = p.positions.as<int32_t>();
  a.x_stride = p.x.strides[0];
  a.tokens = p.x.dim(0);
  a.heads = int(p.x.dim(1));
  a.head_dim = int(p.x.dim(2));
  a.rotary_dim = RotaryDim(p.config, a.head_dim);
  a.neox = p.config.neox;
  const std::vector<float> inv = RopeInvFreq(p.config, a.rotary_dim);
  std::copy(inv.begin(), inv.end(), a.inv_freq);
  cuda::LaunchRope(a, cuda::CurrentStream());
  CheckLaunch();
}

// ---- Matmul ------------------------------------------------------------------------------
void RunMatmul(const MatmulParams& p) {
  cudaStream_t stream = cuda::CurrentStream();
  const int64_t n = p.x.dim(0), k = p.x.dim(1), m = p.w.dim(0);
  const float* bias = p.bias.data ? p.bias.as<float>() : nullptr;
  if (p.out.dtype == DType::kF32) {
    // f32 output (MoE router logits, as HF computes them): the GEMV at any n.
    cuda::GemvArgs gv{Bf(p.x), Bf(p.w), nullptr, bias, n, k, m,
                      p.x.strides[0], p.w.strides[0], p.out.strides[0], p.accumulate};
    gv.out_f32 = p.out.as<float>();
    gv.w_constant = true;  // a Matmul's w is a weight: streamed before the PDL wait
    cuda::LaunchGemv(gv, stream);
    CheckLaunch();
    return;
  }
  cuda::GemvArgs gv{Bf(p.x), Bf(p.w), Bf(p.out), bias, n, k, m,
                    p.x.strides[0], p.w.strides[0], p.out.strides[0], p.accumulate};
  gv.w_constant = true;
  if (n > kGemvMaxRows && !cuda::Bf16RingMmaTake(gv)) {
    cuda::LtGemmArgs lt{Bf(p.x), Bf(p.w), Bf(p.out), n, k, m,
                        p.x.strides[0], p.w.strides[0], p.out.strides[0], p.accumulate};
    if (cuda::LtMatmul(lt, stream)) {
      if (bias) {
        cuda::LaunchBiasAdd({Bf(p.out), bias, p.out.strides[0], n, m}, stream);
        CheckLaunch();
      }
      return;
    }
  }
  cuda::LaunchGemv(gv, stream);
  CheckLaunch();
}

// ---- KV cache and attention --------------------------------------------------------------
// The batch on the device: the caller's plan, or a per-thread upload of the host spans.
const cuda::DeviceBatchView& DeviceBatch(const AttentionBatch& b, cudaStream_t stream) {
  if (b.device) return *b.device;
  PG_ENSURE(!cuda::IsCapturing(stream), kInvalidArgument,
            "CUDA attention under graph capture needs AttentionBatch::device (a DeviceBatchPlan)");
  thread_local cuda::DeviceBatchPlan plan;
  plan.Upload(b, stream);
  return plan.view();
}

// The split partials of a split-K attention launch (a.num_splits > 1; Args: the decode or the
// prefill kernels' args): [num_tokens][heads][num_splits] accumulators of head_dim floats,
// then their (max, sum) pairs, in the thread's partials scratch (every attention kernel of a
// step uses it in stream order).
template <typename Args>
void AttachSplitPartials(Args& a, int64_t num_tokens) {
  const size_t per = size_t(num_tokens) * size_t(a.heads) * size_t(a.num_splits);
  float* ws = static_cast<float*>(cuda::Scratch(cuda::ScratchSlot::kAttentionPartials,
                                                per * size_t(a.head_dim + 2) * sizeof(float)));
  a.partial_acc = ws;
  a.partial_ml = ws + per * size_t(a.head_dim);
}

// The longest causal key range of the batch's sequences (kv_len, capped by a sliding window;
// at least 1): the length split plans are made for.
int64_t LongestKeys(const AttentionBatch& b, int sliding_window) {
  int64_t max_len = 1;
  for (int s = 0; s < b.num_seqs; ++s) max_len = std::max<int64_t>(max_len, b.kv_len[size_t(s)]);
  return sliding_window > 0 ? std::min<int64_t>(max_len, sliding_window) : max_len;
}

cuda::KvWriteArgs KvWriteArgsOf(const KvWriteParams& p, cudaStream_t stream) {
  cuda::KvWriteArgs a{};
  a.k = Bf(p.k);
  a.v = Bf(p.v);
  a.k_cache = p.cache.k_cache.data;
  a.v_cache = p.cache.v_cache.data;
  a.kv_type = KvTypeOf(p.cache);
  a.batch = DeviceBatch(*p.batch, stream);
  a.k_stride = p.k.strides[0];
  a.v_stride = p.v.strides[0];
  a.kv_heads = int(p.k.dim(1));
  a.head_dim = int(p.k.dim(2));
  a.inv_k_scale = 1.0f / p.cache.k_scale;
  a.inv_v_scale = 1.0f / p.cache.v_scale;
  return a;
}

void RunKvWrite(const KvWriteParams& p) {
  cudaStream_t stream = cuda::CurrentStream();
  cuda::LaunchKvWrite(KvWriteArgsOf(p, stream), stream);
  CheckLaunch();
}

cuda::RopeKvWriteArgs RopeKvWriteArgsOf(const RopeKvWriteParams& p, cudaStream_t stream) {
  cuda::RopeKvWriteArgs a{};
  a.kv = KvWriteArgsOf({p.k, p.v, p.cache, p.batch}, stream);
  a.q = Bf(p.q);
  a.positions = p.positions.as<int32_t>();
  a.q_stride = p.q.strides[0];
  a.heads = int(p.q.dim(1));
  a.rotary_dim = RotaryDim(p.config, a.kv.head_dim);
  a.neox = p.config.neox;
  const std::vector<float> inv = RopeInvFreq(p.config, a.rotary_dim);
  std::copy(inv.begin(), inv.end(), a.inv_freq);
  if (p.q_norm.data) {
    a.q_norm = p.q_norm.data;
    a.k_norm = p.k_norm.data;
    a.norm_type = WeightTypeOf(p.q_norm.dtype);
    a.norm_eps = p.norm_eps;
  }
  return a;
}

void RunRopeKvWrite(const RopeKvWriteParams& p) {
  cudaStream_t stream = cuda::CurrentStream();
  cuda::LaunchRopeKvWrite(RopeKvWriteArgsOf(p, stream), stream);
  CheckLaunch();
}

// The decode kernel (attention/decode_attention.cu) for the batch's single-token sequences;
// false when it cannot run them (head dim / cache type) or there are none. Its split count
// comes from the longest such sequence, so a graph captured at the longest kv length serves
// every shorter one.
bool RunDecodeAttention(const AttentionParams& p, const cuda::AttentionArgs& base,
                        cudaStream_t stream) {
  const AttentionBatch& b = *p.batch;
  if (!cuda::DecodeAttentionSupports(base.head_dim, base.heads / base.kv_heads, base.kv_type))
    return false;
  int decode_seqs = 0;
  int64_t max_len = 1;
  for (int s = 0; s < b.num_seqs; ++s) {
    if (b.q_len[size_t(s)] != 1) continue;
    ++decode_seqs;
    int64_t len = b.kv_len[size_t(s)];
    if (p.sliding_window > 0) len = std::min<int64_t>(len, p.sliding_window);
    max_len = std::max(max_len, len);
  }
  if (decode_seqs == 0) return false;
  cuda::AttentionArgs a = base;
  a.num_splits = cuda::DecodeAttentionSplits(a, decode_seqs, max_len);
  if (a.num_splits > 1) {
    AttachSplitPartials(a, p.q.dim(0));
    // Grid rows per query row: kv heads (x head chunks in the CUDA-core kernel; <= heads).
    a.split_counters = cuda::DecodeSplitCounters(p.q.dim(0) * a.heads, stream);
  }
  cuda::LaunchDecodeAttention(a, stream);
  CheckLaunch();
  return true;
}

// Sequences with at least this many new tokens go to the tensor-core prefill kernel
// (attention/prefill_attention.h) when it has the head dim; the decode kernel does the rest.
constexpr int kPrefillMinQLen = 2;

// Launches the prefill kernel for the batch's sequences with q_len >= kPrefillMinQLen.
// Returns the q_len from which the decode kernel must skip rows (0: the prefill kernel ran
// nothing and the decode kernel does every row).
int RunPrefillAttention(const AttentionParams& p, const cuda::DeviceBatchView& dev,
                        float logit_scale, cudaStream_t stream) {
  const AttentionBatch& b = *p.batch;
  cuda::PrefillAttentionArgs a{};
  a.head_dim = int(p.q.dim(2));
  const DType kv_dtype = p.cache.k_cache.dtype;
  if (!cuda::PrefillAttentionSupportsHeadDim(a.head_dim) ||
      (kv_dtype != DType::kBF16 && kv_dtype != DType::kF8E4M3) || p.cache.v_cache.dtype != kv_dtype)
    return 0;
  a.kv_fp8 = kv_dtype == DType::kF8E4M3;
  a.heads = int(p.q.dim(1));
  a.kv_heads = int(p.cache.k_cache.dim(2));
  a.min_q_len = kPrefillMinQLen;
  // 128-row tiles when every multi-token sequence fills at least four of them (measured
  // 3-7% faster on 32K prompts and 800-on-50K, docs/PERF.md), else 64 (less padding). This is
  // the mma.sync kernel's rule: the plan gives head_dim-128 bf16 shapes on sm_90 to the wgmma
  // kernel, always with 128-row tiles.
  int64_t min_rows = INT64_MAX;
  for (int s = 0; s < b.num_seqs; ++s)
    if (b.q_len[size_t(s)] >= kPrefillMinQLen)
      min_rows = std::min<int64_t>(min_rows, int64_t(b.q_len[size_t(s)]) * (a.heads / a.kv_heads));
  a.block_m = min_rows != INT64_MAX && min_rows >= 512 ? 128 : 64;
  cuda::PlanPrefillAttention(a, b.q_len.data(), b.kv_len.data(), b.num_seqs);
  if (a.num_tiles == 0) return 0;
  a.q = Bf(p.q);
  a.out = Bf(p.out);
  a.k_cache = p.cache.k_cache.data;
  a.v_cache = p.cache.v_cache.data;
  a.batch = dev;
  a.q_stride = p.q.strides[0];
  a.out_stride = p.out.strides[0];
  a.logit_scale = logit_scale;
  a.v_scale = p.cache.v_scale;
  a.softcap = p.logit_softcap;
  a.sliding_window = p.sliding_window;
  if (a.num_splits > 1) AttachSplitPartials(a, p.q.dim(0));
  cuda::LaunchPrefillAttention(a, stream);
  CheckLaunch();
  return a.min_q_len;
}

// The args every attention kernel shares (no batch, splits or scratch yet).
cuda::AttentionArgs AttentionArgsOf(const AttentionParams& p) {
  cuda::AttentionArgs a{};
  a.q = Bf(p.q);
  a.out = Bf(p.out);
  a.k_cache = p.cache.k_cache.data;
  a.v_cache = p.cache.v_cache.data;
  a.kv_type = KvTypeOf(p.cache);
  a.q_stride = p.q.strides[0];
  a.out_stride = p.out.strides[0];
  a.heads = int(p.q.dim(1));
  a.kv_heads = int(p.cache.k_cache.dim(2));
  a.head_dim = int(p.q.dim(2));
  const float scale = p.scale > 0 ? p.scale : 1.0f / std::sqrt(float(a.head_dim));
  a.logit_scale = scale * p.cache.k_scale;
  a.v_scale = p.cache.v_scale;
  a.softcap = p.logit_softcap;
  a.sliding_window = p.sliding_window;
  return a;
}

void RunAttention(const AttentionParams& p) {
  cudaStream_t stream = cuda::CurrentStream();
  const AttentionBatch& b = *p.batch;
  cuda::AttentionArgs a = AttentionArgsOf(p);
  // Split-K: about 8 (row, kv head, split) blocks per SM (the kernel is latency bound: more
  // warps in flight), splits of >= 64 keys.
  const int64_t max_len = LongestKeys(b, p.sliding_window);
  const int64_t num_tokens = p.q.dim(0);
  const int64_t base_blocks = std::max<int64_t>(1, num_tokens * a.kv_heads);
  const int64_t target = 8 * int64_t(cuda::MultiprocessorCount());
  int64_t splits = 1;
  if (base_blocks < target)
    splits = std::min((target + base_blocks - 1) / base_blocks, (max_len + 63) / 64);
  splits = std::clamp<int64_t>(splits, 1, 1024);
  int64_t chunk = (max_len + splits - 1) / splits;
  chunk = (chunk + 31) / 32 * 32;  // whole warp tiles
  a.chunk = int(chunk);
  a.num_splits = int((max_len + chunk - 1) / chunk);
  a.batch = DeviceBatch(b, stream);
  // Multi-token sequences first. Both kernels use the partials scratch, in stream order: the
  // decode kernel's Scratch() call comes after the prefill launch (a grow syncs the stream).
  a.prefill_min_q_len = RunPrefillAttention(p, a.batch, a.logit_scale, stream);
  // Single-token sequences: the decode kernel; the general kernel skips their rows then.
  a.decode_rows_done = RunDecodeAttention(p, a, stream);
  bool any_rest = false;  // rows neither the prefill nor the decode kernel took
  for (int s = 0; s < b.num_seqs && !any_rest; ++s) {
    const int32_t ql = b.q_len[size_t(s)];
    any_rest = ql > 0 && !(ql == 1 && a.decode_rows_done) &&
               !(a.prefill_min_q_len > 0 && ql >= a.prefill_min_q_len);
  }
  if (!any_rest) return;
  if (a.num_splits > 1) AttachSplitPartials(a, num_tokens);
  cuda::LaunchAttention(a, stream);
  CheckLaunch();
}

// ---- fused decode attention (ops_fused_attention.h) --------------------------------------
// The fused kernel takes decode batches (every sequence q_len 1) of at most this many
// sequences (larger ones and prefill rows run the composition); with fp8 caches and fewer
// than 64 keys per split (every shape since session 7) at most PG_FUSED_MAX_FP8_KEYS (default 16K) keys in the batch's
// plan (sequences x longest kv length): Llama-3.1-8B fp8 8 x 32K measured 13452 us per step
// fused vs 12052 unfused, 1 x 32K +16 / +135 us (two runs); the other Llama-3.1-8B /
// Qwen3-30B-A3B step cells (1K / 32K x 1 / 8, bf16 / fp8 KV) measured faster fused or equal
// (docs/PERF.md "Single-kernel decode attention").
constexpr int kFusedAttentionMaxSeqs = 8;
// Read at every call (eager dispatch only; a captured graph keeps its choice), so a test can
// set the variable whatever ran before it.
int64_t FusedAttentionMaxFp8Keys() { return EnvInt("PG_FUSED_MAX_FP8_KEYS", 16384); }

bool RopeKvWriteSupported(const RopeKvWriteParams& p) {
  return DevBf16(p.q) && DevBf16(p.k) && DevBf16(p.v) && DevKv(p.cache.k_cache) &&
         DevKv(p.cache.v_cache) && RotaryDim(p.config, int(p.q.dim(2))) / 2 <= cuda::kMaxRopePairs &&
         (!p.q_norm.data || (p.q_norm.device == Device::kCuda && p.q_norm.dtype == p.k_norm.dtype));
}

// Whether an fp8 plan past the fused kernels' range runs fused anyway: RunFusedAttention then
// takes the streaming kernel with the new token inside (shape fields only: no upload), at
// most 2 rows. H200, step µs against the composition (RopeKvWrite + the streaming kernel):
// Llama-3.1-8B 1 x 32K 5110 / 5105 vs 5323 / 5331, 2 x 16K 5481 / 5468 vs 5671 / 5635,
// Qwen3-30B-A3B 1 x 32K 3777 / 3805 vs 4007 / 4015; but 8 x 32K 11312 / 11310 vs 11265 /
// 11261 (the fp8 consumers are the bound there). PG_FUSED_FP8_STREAM=0: never.
bool StreamFusedRoute(const RopeKvWriteAttentionParams& p, int64_t max_len) {
  static const bool fp8_stream = EnvFlag("PG_FUSED_FP8_STREAM", true);
  if (!fp8_stream || p.rope.batch->num_seqs > 2) return false;
  const RopeKvWriteParams& r = p.rope;
  cuda::AttentionArgs a{};
  a.heads = int(r.q.dim(1));
  a.kv_heads = int(r.cache.k_cache.dim(2));
  a.head_dim = int(r.q.dim(2));
  a.kv_type = KvTypeOf(r.cache);
  cuda::RopeKvWriteArgs rope{};
  rope.rotary_dim = RotaryDim(r.config, a.head_dim);
  rope.neox = r.config.neox;
  return cuda::DecodeStreamPreferred(a, r.batch->num_seqs, max_len) &&
         cuda::DecodeStreamFusedSupports(a, rope);
}

bool FusedAttentionSupported(const RopeKvWriteAttentionParams& p) {
  const RopeKvWriteParams& r = p.rope;
  if (!RopeKvWriteSupported(r) || !DevBf16(p.out) || r.cache.k_cache.dtype != r.cache.v_cache.dtype)
    return false;
  // The fused kernels take no logit softcap (decode_attention_mma.cu): the composition runs it.
  if (p.logit_softcap > 0.0f) return false;
  const AttentionBatch& b = *r.batch;
  if (b.num_seqs == 0 || b.num_seqs > kFusedAttentionMaxSeqs) return false;
  for (int32_t l : b.q_len)
    if (l != 1) return false;
  const int heads = int(r.q.dim(1)), kv_heads = int(r.cache.k_cache.dim(2));
  const int64_t max_len = LongestKeys(b, p.sliding_window);
  if (r.cache.k_cache.dtype == DType::kF8E4M3 &&
      cuda::DecodeFusedMinSplitKeys(kv_heads, max_len) < 64 &&
      int64_t(b.num_seqs) * max_len > FusedAttentionMaxFp8Keys() && !StreamFusedRoute(p, max_len))
    return false;
  return cuda::DecodeFusedSupports(int(r.q.dim(2)), heads / kv_heads, KvTypeOf(r.cache));
}

void RunFusedAttention(const RopeKvWriteAttentionParams& p) {
  cudaStream_t stream = cuda::CurrentStream();
  const AttentionParams ap = AttentionStepOf(p);
  const AttentionBatch& b = *ap.batch;
  cuda::AttentionArgs a = AttentionArgsOf(ap);
  a.batch = DeviceBatch(b, stream);
  const int64_t max_len = LongestKeys(b, ap.sliding_window);
  // Long contexts: the streaming decode kernel (fixed at capture by the planned length, as
  // the split plan), with the new token's RoPE + cache write inside it where it can, else
  // after RopeKvWrite. Its splits as the Attention op plans them (RunDecodeAttention).
  if (cuda::DecodeStreamPreferred(a, b.num_seqs, max_len)) {
    const cuda::RopeKvWriteArgs rope = RopeKvWriteArgsOf(p.rope, stream);
    if (!cuda::DecodeStreamFusedSupports(a, rope))
      return RunRopeKvWriteAttentionComposed(p, /*reference=*/false);
    a.num_splits = cuda::DecodeAttentionSplits(a, b.num_seqs, max_len);
    if (a.num_splits > 1) AttachSplitPartials(a, p.out.dim(0));
    a.l2_after.ptr = static_cast<const char*>(p.l2_after.data);
    a.l2_after.bytes = p.l2_after.data != nullptr ? p.l2_after.nbytes() : 0;
    cuda::LaunchDecodeStreamFused(a, rope, stream);
    CheckLaunch();
    return;
  }
  a.min_split_keys = cuda::DecodeFusedMinSplitKeys(a.kv_heads, max_len);
  a.num_splits = cuda::DecodeFusedSplits(a, b.num_seqs, max_len);
  if (a.num_splits > 1) {
    // The splits merge inside the kernel: no counters (first growth under graph capture) ->
    // the composition instead.
    a.split_counters = cuda::DecodeSplitCounters(p.out.dim(0) * a.heads, stream);
    if (a.split_counters == nullptr) {
      static bool warned = false;
      if (!warned) PG_LOG_WARN("RopeKvWriteAttention: no split counters under graph capture "
                               "(no eager call before it): the unfused ops run instead");
      warned = true;
      return RunRopeKvWriteAttentionComposed(p, /*reference=*/false);
    }
    AttachSplitPartials(a, p.out.dim(0));
  }
  cuda::LaunchDecodeFused(a, RopeKvWriteArgsOf(p.rope, stream), stream, max_len);
  CheckLaunch();
}

template <typename P>
KernelImpl<P> Cuda(std::function<bool(const P&)> supports, void (*run)(const P&)) {
  return KernelImpl<P>{"cuda", Device::kCuda, kPriorityCuda, std::move(supports), run};
}

}  // namespace

void RegisterCudaKernels(Registry& r) {
  if (cuda::DeviceCount() == 0) {
    PG_LOG_WARN("CUDA build, but no CUDA device is visible: CUDA kernels not registered");
    return;
  }
  r.Register(Cuda<AddParams>(
      [](const AddParams& p) { return DevBf16(p.a) && DevBf16(p.b) && DevBf16(p.out); }, &RunAdd));
  r.Register(Cuda<SwiGluParams>(
      [](const SwiGluParams& p) {
        return DevBf16(p.gate) && DevBf16(p.out) && (!p.up.data || DevBf16(p.up));
      },
      &RunSwiGlu));
  r.Register(Cuda<EmbeddingParams>(
      [](const EmbeddingParams& p) { return DevBf16(p.table) && DevBf16(p.out); }, &RunEmbedding));
  r.Register(Cuda<RmsNormParams>(
      [](const RmsNormParams& p) {
        return DevBf16(p.x) && DevBf16(p.out) && (!p.residual.data || DevBf16(p.residual));
      },
      &RunRmsNorm));
  r.Register(Cuda<RopeParams>(
      [](const RopeParams& p) {
        return DevBf16(p.x) && RotaryDim(p.config, int(p.x.dim(2))) / 2 <= cuda::kMaxRopePairs;
      },
      &RunRope));
  r.Register(Cuda<MatmulParams>(
      [](const MatmulParams& p) {
        const bool out_f32 = p.out.device == Device::kCuda && p.out.dtype == DType::kF32;
        return DevBf16(p.x) && DevBf16(p.w) && (DevBf16(p.out) || out_f32);
      },
      &RunMatmul));
  r.Register(Cuda<KvWriteParams>(
      [](const KvWriteParams& p) {
        return DevBf16(p.k) && DevBf16(p.v) && DevKv(p.cache.k_cache) && DevKv(p.cache.v_cache);
      },
      &RunKvWrite));
  r.Register(Cuda<RopeKvWriteParams>(&RopeKvWriteSupported, &RunRopeKvWrite));
  // bf16 caches: every batch (decode kernel for single-token rows, prefill / general kernel
  // for the rest); fp8 caches: decode batches (the decode kernel reads fp8).
  r.Register(Cuda<AttentionParams>(
      [](const AttentionParams& p) {
        if (!(DevBf16(p.q) && DevBf16(p.out) && DevKv(p.cache.k_cache) && DevKv(p.cache.v_cache)))
          return false;
        const int d = int(p.q.dim(2));
        if (p.cache.k_cache.dtype == DType::kBF16) return cuda::AttentionSupportsHeadDim(d);
        // fp8 caches: single-token sequences need the decode kernel, multi-token ones the
        // prefill kernel or (other head dims) the row kernel, which reads fp8 too.
        const bool decode_ok = cuda::DecodeAttentionSupports(
            d, int(p.q.dim(1) / p.cache.k_cache.dim(2)), cuda::KvType::kF8E4M3);
        const bool prefill_ok =
            cuda::PrefillAttentionSupportsHeadDim(d) || cuda::AttentionSupportsHeadDim(d);
        for (int32_t l : p.batch->q_len)
          if ((l == 1 && !decode_ok) || (l >= kPrefillMinQLen && !prefill_ok)) return false;
        return true;
      },
      &RunAttention));
}

// RopeKvWriteAttention: the fused kernel on small decode batches, else the composition (each
// step on its own CUDA kernel).
void RegisterCudaFusedAttentionKernels(Registry& r) {
  if (cuda::DeviceCount() == 0) return;
  using K = KernelImpl<RopeKvWriteAttentionParams>;
  r.Register(Cuda<RopeKvWriteAttentionParams>(&FusedAttentionSupported, &RunFusedAttention));
  r.Register(K{"cuda_composed", Device::kCuda, kPriorityCuda - 1, {},
               [](const RopeKvWriteAttentionParams& p) { RunRopeKvWriteAttentionComposed(p, false); }});
}

}  // namespace pg::ops
