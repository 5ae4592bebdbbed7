// GpuRunner: runs a device-resident model on one GPU. It owns the device arena (sized by
// --gpu-memory-utilization), the step's stream, the batch plan, the device token/position/
// logit buffers, the paged KV cache and the decode CUDA graphs.
//
// Memory layout of the arena, carved once (no cudaMalloc on the hot path):
//   [model weights + activation scratch] (placed through memory())
//   [io buffers: ids, positions, logits, sampling rows / tokens / logprobs]  (Attach)
//   [token counts per slot (penalties); KV pages of every layer]  (ConfigureKv; replaced by a
//    later ConfigureKv)
// Two KV layouts:
//  * slots (ConfigureKv): pages are static per slot: slot s owns pages
//    [s * pages_per_slot, (s+1) * pages_per_slot) (benchmarks, model tests);
//  * paged (ConfigurePagedKv): a pool of pages the caller allocates (the engine's scheduler);
//    each StepSeq brings its own page table, and "slots" are only token-count rows of the
//    device sampler.
// Either way one extra page (the last) is the write target of padding rows in padded decode
// graphs and of the graph captures of the paged layout.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cuda/attention/decode_fused.h"
#include "kernels/cuda/batch_plan.h"
#include "kernels/ops_sample.h"
#include "models/model.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/cuda/stream.h"

namespace pg::runtime::cuda {

// Decode graph sets' kv lengths below the longest (GpuRunner::CaptureDecode's kv_buckets) that
// the engine captures by default: the attention plans change with the planned length (the
// fused kernel's cluster plan up to 4K for GQA groups above 4 (14K at batch 1 for groups of
// 5-8: 8K as one cluster a kv head, then its counter form), its small variant up to 2K, the
// streaming kernel past that at batch 1 (past 4K keys for groups <= 4) and from 16K keys in
// all for batches, the split counts), and a graph replays the plan of the length it was
// captured at. 4096: the
// fused kernel's cluster plan (kernels/cuda/attention decode_fused_plan.cu ClusterPlan)
// applies to plans of <= 4096 keys; H200, Qwen3-30B-A3B one row at 3K / 4K keys: 3176 / 3231
// -> 3005 / 3089 us a step with the plan and this set, eight rows equal (docs/PERF.md
// "Session 17"); Llama-3.1-8B equal. (A 1024 set was measured too: eight rows at 1K lost
// 140-200 us against the 2048 set's plan on both models.) 14336: the cluster plan's counter
// form for one sequence of a group 5-8 past 8K keys (decode_fused.h kCounterOneSeqMaxKeys),
// which the 32768 set's streaming plan would otherwise replay at 8K-14K; H100, Qwen3-30B-A3B
// one row at 8.5K / 10K / 12K: 3565.2 / 3605.4 / 3661.6 -> 3441.3 / 3494.6 / 3592.4 us a step
// with the form to 12K and a 12288 set (docs/PERF.md "Session 41"), then to 14K with this set
// instead: 10K / 12K / 13K / 14K 3482.6 / 3572.7 / 3687.8 / 3720.7 -> 3489.5 / 3580.4 / 3651.5
// / 3710.0 (knobs); the defaults' binary against the 12288 rules (docs/PERF.md "Session 42",
// three rounds): 13K / 14K 3726.3 / 3762.5 -> 3685.9 / 3742.3, 8.5K-12K and 16K within 5.
// 8192 and 14336 are the cluster plan's two reaches for one sequence, so they move with them.
inline constexpr int kDefaultDecodeKvBuckets[] = {2048, 4096, int(::pg::cuda::kClusterOneSeqMaxKeys),
                                                  int(::pg::cuda::kCounterOneSeqMaxKeys), 32768};

struct GpuRunnerOptions {
  double gpu_memory_utilization = 0.9;
  int max_batch_tokens = 512;  // tokens per step (prefill chunk, or decode batch incl. padding)
  int page_size = 16;          // tokens per KV page
  // KV cache element type: kBF16, or kF8E4M3 (per-tensor scales 1.0; ops.h KvCacheView).
  DType kv_dtype = DType::kBF16;
};

struct KvLayout {
  int num_slots = 0;           // sequences that can be resident at once
  int max_context = 0;         // tokens per sequence
  int64_t num_pages = 0;       // all layers share this page count (and the page indices)
  int64_t bytes = 0;           // KV bytes of all layers
  bool paged = false;          // ConfigurePagedKv: pages come with each StepSeq
  int64_t page_bytes = 0;      // one page of every layer, K and V (SavePage / LoadPage)
};

struct PagedKvOptions {
  int64_t num_pages = 0;      // usable pages; 0 = as many as fit in the arena
  int64_t reserve_bytes = 0;  // arena bytes to leave free when num_pages == 0
  int count_rows = 1;         // token-count rows (device penalties), ops::SampleRow::counts_row
  int max_seqs = 1;           // sequences of one step (the batch plan's capacity)
  int max_context = 0;        // tokens per sequence
};

// One sequence's part of a step: tokens appended at positions [start, start + tokens.size()).
struct StepSeq {
  int slot = 0;                    // slot layout: the sequence's slot (ignored when paged)
  int start = 0;
  std::span<const int32_t> tokens;
  // Paged layout: the pages of positions [0, start + tokens.size()) in order (position p in
  // pages[p / page_size]); may be longer (the rest is ignored). Each in [0, num_pages - 1).
  std::span<const int32_t> pages = {};
};

class GpuRunner {
 public:
  explicit GpuRunner(const GpuRunnerOptions& options);
  ~GpuRunner();
  GpuRunner(const GpuRunner&) = delete;
  GpuRunner& operator=(const GpuRunner&) = delete;

  // The arena as models::DeviceMemory: place the model through it before Attach.
  models::DeviceMemory& memory();
  const DeviceArena& arena() const;
  cudaStream_t stream() const { return stream_.get(); }

  // Binds a model already placed on this runner's memory; carves the io buffers.
  void Attach(models::Model& model);

  // (Re)lays out the KV cache for `num_slots` sequences of up to `max_context` tokens,
  // replacing any earlier layout (and dropping captured graphs). Throws kResourceExhausted,
  // naming the need and what is left, when it does not fit.
  const KvLayout& ConfigureKv(int num_slots, int max_context);
  // Paged layout: a pool of pages (see the file comment); replaces any earlier layout. With
  // num_pages == 0 it takes what the arena has left after reserve_bytes. Throws
  // kResourceExhausted when not even 2 pages fit.
  const KvLayout& ConfigurePagedKv(const PagedKvOptions& options);
  const KvLayout& kv_layout() const;
  // Copies page `page` of every layer (K then V, layer by layer: layout().page_bytes) to / from
  // pinned host memory, in stream order (asynchronous: the host bytes of SavePage are ready
  // after the next synchronising call, e.g. Sample).
  void SavePage(int64_t page, void* host);
  void LoadPage(int64_t page, const void* host);
  // Fills every KV page with random values (benchmarks: realistic bytes, no NaN garbage).
  void FillKvRandom(uint64_t seed);
  int64_t kv_bytes_per_token() const;

  // One eager forward: each sequence's tokens, logits for the last token of each sequence
  // ([seqs.size(), vocab] f32, host). Throws kInvalidArgument/kOutOfRange for a step that
  // does not fit the layout (the KV state of the runner is then unchanged).
  void Step(std::span<const StepSeq> seqs, std::span<float> logits);

  // Decode graphs: one token per sequence, padded to each of `batch_sizes`, captured for
  // kv lengths up to `max_kv_len` and, as further sets, up to each of `kv_buckets` below it
  // (the attention's plan — split layout, kernel variant — is fixed at capture for the
  // longest length a set serves, so short contexts replay a plan made for them rather than
  // one made for max_kv_len). Warms every size up eagerly first.
  void CaptureDecode(std::span<const int> batch_sizes, int max_kv_len,
                     std::span<const int> kv_buckets = {});
  // A decode step through the captured graph of the smallest size >= seqs.size(), from the
  // set of the shortest kv bucket that holds every seq's kv length; every seq has exactly
  // one token. logits as in Step (may be empty: no read-back, for timing).
  void Decode(std::span<const StepSeq> seqs, std::span<float> logits);
  // The kv lengths of the captured graph sets, ascending (the last is max_kv_len).
  std::vector<int> decode_kv_buckets() const;
  bool has_graphs() const { return captured_max_kv_len_ > 0; }

  // Samples one token per sequence of the last Step / Decode from its logits on the device
  // (ops::Sample; rows[i] for sequence i, in order) and copies back only the tokens, and the
  // chosen tokens' logprobs when `logprobs` is not empty. A row with counts_row = its slot
  // applies penalties from that slot's token counts and records the token there.
  void Sample(std::span<const ops::SampleRow> rows, std::span<int32_t> tokens,
              std::span<float> logprobs = {});
  // Row `seq` of the last Step / Decode's logits (f32 on the host; synchronises). For callers
  // that need the whole distribution of a few rows (top logprobs).
  void ReadLogitsRow(int seq, std::span<float> out);
  int max_graph_batch() const { return captured_max_batch_; }
  // Sets a slot's token counts (penalties) to a new request's prompt: nothing generated.
  void ResetTokenCounts(int slot, std::span<const int32_t> prompt);
  // Replays the graph of `padded_size` (of the set the last Decode chose; after CaptureDecode:
  // the max_kv_len set) on the batch the last Decode/CaptureDecode staged, with no host work
  // in between (benchmarks: back-to-back replays measure the GPU's step time).
  void ReplayStaged(int padded_size);

 private:
  struct Impl;
  // Packs the host batch and uploads it (tokens, positions, batch plan). `pad_to` adds padding
  // rows (slot = the pad page, kv_len 1) up to that many sequences.
  void Prepare(std::span<const StepSeq> seqs, int pad_to, int forced_max_kv_len);
  // Carves count rows and `num_pages` KV pages (+ the padding page) after the io buffers.
  void AllocateKv(int count_rows, int64_t num_pages, int max_context);
  void RunForward();
  // One graph set of CaptureDecode: every size (ascending) at kv length max_kv_len.
  void CaptureDecodeSet(std::span<const int> sizes, int max_kv_len, DecodeGraphs& graphs);
  void ReadLogits(std::span<float> logits, int num_seqs);

  GpuRunnerOptions options_;
  int last_num_seqs_ = 0;  // sequences of the last Step / Decode (rows of its logits)
  Stream stream_;
  std::unique_ptr<Impl> impl_;
  int captured_max_kv_len_ = 0;
  int captured_max_batch_ = 0;
  bool paged_capture_ = false;  // CaptureDecode of the paged layout: rows use the padding page
};

}  // namespace pg::runtime::cuda
