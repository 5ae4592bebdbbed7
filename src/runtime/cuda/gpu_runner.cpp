#include "runtime/cuda/gpu_runner.h"

#include <algorithm>
#include <cstring>

#include "core/log.h"
#include "core/status.h"
#include "kernels/cuda/common/context.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/fill.h"

namespace pg::runtime::cuda {
namespace {

// models::DeviceMemory over the runner's arena; copies and fills run on the runner's stream
// and are synchronous (start-up only).
class ArenaMemory final : public models::DeviceMemory {
 public:
  ArenaMemory(DeviceArena& arena, cudaStream_t stream) : arena_(arena), stream_(stream) {}
  Device device() const override { return Device::kCuda; }
  void* Allocate(size_t bytes) override { return arena_.Allocate(bytes, 256); }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    PG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    PG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    PG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    PG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void FillRandom(void* dst, DType dtype, int64_t count, float mean, float std,
                  uint64_t seed) override {
    PG_CHECK(dtype == DType::kBF16 || dtype == DType::kF32 || dtype == DType::kF8E4M3,
             "FillRandom dtype");
    pg::cuda::LaunchFillRandom(
        {dst, count, dtype == DType::kBF16, mean, std, seed, dtype == DType::kF8E4M3}, stream_);
    PG_CUDA_CHECK_LAUNCH();
  }

 private:
  DeviceArena& arena_;
  cudaStream_t stream_;
};

}  // namespace

struct GpuRunner::Impl {
  DeviceArena arena;
  ArenaMemory memory;
  models::Model* model = nullptr;
  size_t io_mark = 0;           // arena offset where the KV region starts
  // io buffers (device) and their pinned staging
  int32_t* d_ids = nullptr;     // [max_batch_tokens]
  int32_t* d_pos = nullptr;     // [max_batch_tokens]
  uint16_t* d_logits = nullptr; // [max_batch_tokens, vocab] bf16
  PinnedBuffer h_io;            // ids then positions, 2 * max_batch_tokens i32
  PinnedBuffer h_logits;        // [max_batch_tokens, vocab] bf16
  // device sampling: rows in, tokens (+ logprobs) out; pinned staging of the same layout
  ops::SampleRow* d_sample_rows = nullptr;  // [max_batch_tokens]
  int32_t* d_sampled = nullptr;             // [max_batch_tokens] tokens, then as many f32 logprobs
  PinnedBuffer h_sample;                    // rows, then tokens, then logprobs
  int32_t* d_counts = nullptr;              // [num_slots, vocab] (ops_sample.h encoding)
  // KV
  KvLayout layout;
  int64_t pages_per_slot = 0;
  models::KvCacheLayers kv;
  // the prepared batch (host) and its device plan
  std::vector<int32_t> tokens, positions, q_start, q_len, kv_len, page_start, page_table, rows;
  ops::AttentionBatch batch;
  pg::cuda::DeviceBatchPlan plan;
  // Decode graph sets by the longest kv length each serves, ascending; staged: the set the
  // last Decode (or CaptureDecode: the longest) chose.
  std::vector<std::pair<int, DecodeGraphs>> graph_sets;
  size_t staged_set = 0;

  Impl(size_t bytes, cudaStream_t s) : arena(bytes), memory(arena, s) {}
};

GpuRunner::GpuRunner(const GpuRunnerOptions& options) : options_(options) {
  PG_ENSURE(options.kv_dtype == DType::kBF16 || options.kv_dtype == DType::kF8E4M3,
            kInvalidArgument, "gpu runner: KV cache dtype must be bf16 or fp8 (e4m3)");
  PG_ENSURE(options.max_batch_tokens > 0 && options.page_size > 0, kInvalidArgument,
            "gpu runner: max_batch_tokens {} and page_size {} must be > 0",
            options.max_batch_tokens, options.page_size);
  const DeviceMemoryBudget budget = PlanDeviceMemory(options.gpu_memory_utilization);
  PG_ENSURE(budget.arena_bytes > 0, kResourceExhausted,
            "--gpu-memory-utilization {}: nothing left for the arena ({} of {} MiB free)",
            options.gpu_memory_utilization, budget.free_bytes >> 20, budget.total_bytes >> 20);
  impl_ = std::make_unique<Impl>(budget.arena_bytes, stream_.get());
  PG_LOG_INFO("gpu: arena {:.1f} GiB of {:.1f} GiB (utilization {})",
              double(budget.arena_bytes) / (1 << 30), double(budget.total_bytes) / (1 << 30),
              options.gpu_memory_utilization);
}

GpuRunner::~GpuRunner() {
  if (impl_) cudaStreamSynchronize(stream_.get());
}

models::DeviceMemory& GpuRunner::memory() { return impl_->memory; }
const DeviceArena& GpuRunner::arena() const { return impl_->arena; }

void GpuRunner::Attach(models::Model& model) {
  PG_ENSURE(model.on_device(), kInvalidArgument, "gpu runner: the model is not on the device");
  Impl& I = *impl_;
  PG_CHECK(I.model == nullptr, "gpu runner: a model is already attached");
  I.model = &model;
  const int64_t n = options_.max_batch_tokens, vocab = model.config().vocab_size;
  I.d_ids = static_cast<int32_t*>(I.arena.Allocate(size_t(n) * 4));
  I.d_pos = static_cast<int32_t*>(I.arena.Allocate(size_t(n) * 4));
  I.d_logits = static_cast<uint16_t*>(I.arena.Allocate(size_t(n * vocab) * 2));
  I.h_io = PinnedBuffer(size_t(n) * 8);
  I.h_logits = PinnedBuffer(size_t(n * vocab) * 2);
  I.d_sample_rows = static_cast<ops::SampleRow*>(I.arena.Allocate(size_t(n) * sizeof(ops::SampleRow)));
  I.d_sampled = static_cast<int32_t*>(I.arena.Allocate(size_t(n) * 8));
  I.h_sample = PinnedBuffer(size_t(n) * (sizeof(ops::SampleRow) + 8));
  I.io_mark = I.arena.used();
}

int64_t GpuRunner::kv_bytes_per_token() const {
  return impl_->model->kv_spec().BytesPerToken(options_.kv_dtype);
}

void GpuRunner::AllocateKv(int count_rows, int64_t num_pages, int max_context) {
  Impl& I = *impl_;
  PG_CHECK(I.model != nullptr, "gpu runner: Attach a model first");
  PG_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  I.graph_sets.clear();
  captured_max_kv_len_ = 0;
  captured_max_batch_ = 0;
  I.kv.layers.clear();
  I.layout = {};
  I.arena.ResetTo(I.io_mark);
  const int64_t vocab = I.model->config().vocab_size;
  I.d_counts = static_cast<int32_t*>(I.arena.Allocate(size_t(count_rows * vocab) * 4));
  PG_CUDA_CHECK(cudaMemsetAsync(I.d_counts, 0, size_t(count_rows * vocab) * 4, stream_.get()));
  const models::KvSpec spec = I.model->kv_spec();
  const int ps = options_.page_size;
  const DType kv_dtype = options_.kv_dtype;
  const int64_t page_layer_bytes =
      int64_t(ps) * spec.num_kv_heads * spec.head_dim * int64_t(Info(kv_dtype).block_bytes);
  const int64_t per_layer = (num_pages + 1) * page_layer_bytes;  // + the padding page
  const int64_t need = 2 * per_layer * spec.num_layers;
  const int64_t left = int64_t(I.arena.available());
  PG_ENSURE(need + 256 * 2 * spec.num_layers <= left, kResourceExhausted,
            "KV cache of {} pages x {} tokens needs {:.2f} GiB; {:.2f} GiB of the arena left",
            num_pages, ps, double(need) / (1 << 30), double(left) / (1 << 30));
  for (int l = 0; l < spec.num_layers; ++l) {
    ops::KvCacheView v;
    for (TensorView* t : {&v.k_cache, &v.v_cache})
      *t = TensorView::Contiguous(I.arena.Allocate(size_t(per_layer)), kv_dtype,
                                  {num_pages + 1, ps, spec.num_kv_heads, spec.head_dim},
                                  Device::kCuda);
    I.kv.layers.push_back(v);
  }
  I.layout.num_slots = count_rows;
  I.layout.max_context = max_context;
  I.layout.num_pages = num_pages + 1;
  I.layout.bytes = need;
  I.layout.page_bytes = 2 * page_layer_bytes * spec.num_layers;
}

const KvLayout& GpuRunner::ConfigureKv(int num_slots, int max_context) {
  Impl& I = *impl_;
  PG_ENSURE(num_slots > 0 && max_context > 0, kInvalidArgument,
            "kv layout: {} slots of {} tokens", num_slots, max_context);
  const int ps = options_.page_size;
  I.pages_per_slot = (int64_t(max_context) + ps - 1) / ps;
  AllocateKv(num_slots, I.pages_per_slot * num_slots, max_context);
  PG_LOG_INFO("gpu: KV cache {} sequences x {} tokens = {:.2f} GiB ({} pages of {}); arena {:.1f} "
              "GiB left",
              num_slots, max_context, double(I.layout.bytes) / (1 << 30), I.layout.num_pages, ps,
              double(I.arena.available()) / (1 << 30));
  // The batch plan's capacity: the largest batch (every slot full, plus padding rows).
  I.plan.Reserve(options_.max_batch_tokens, options_.max_batch_tokens,
                 int64_t(options_.max_batch_tokens) * I.pages_per_slot + 1);
  return I.layout;
}

const KvLayout& GpuRunner::ConfigurePagedKv(const PagedKvOptions& o) {
  Impl& I = *impl_;
  PG_CHECK(I.model != nullptr, "gpu runner: Attach a model first");
  PG_ENSURE(o.count_rows > 0 && o.max_seqs > 0 && o.max_context > 0 && o.num_pages >= 0 &&
                o.reserve_bytes >= 0,
            kInvalidArgument, "paged kv: {} count rows, {} seqs, context {}, {} pages",
            o.count_rows, o.max_seqs, o.max_context, o.num_pages);
  const int ps = options_.page_size;
  const int64_t pages_per_seq = (int64_t(o.max_context) + ps - 1) / ps;
  int64_t num_pages = o.num_pages;
  if (num_pages == 0) {
    // What is left after the io buffers, the count rows, the reserve and the per-layer
    // allocation alignment, in whole pages (+ the padding page).
    const models::KvSpec spec = I.model->kv_spec();
    const int64_t page = 2 * int64_t(ps) * spec.num_kv_heads * spec.head_dim *
                         int64_t(Info(options_.kv_dtype).block_bytes) * spec.num_layers;
    const int64_t counts = int64_t(o.count_rows) * I.model->config().vocab_size * 4 + 256;
    const int64_t left = int64_t(I.arena.capacity()) - int64_t(I.io_mark) - counts -
                         o.reserve_bytes - 512 * 2 * spec.num_layers;
    num_pages = left / page - 1;
    PG_ENSURE(num_pages >= 2, kResourceExhausted,
              "paged kv: {:.2f} GiB of the arena left after the weights and a reserve of {:.2f} "
              "GiB: fewer than 2 pages of {:.2f} MiB; raise --gpu-memory-utilization",
              double(int64_t(I.arena.capacity()) - int64_t(I.io_mark)) / (1 << 30),
              double(o.reserve_bytes) / (1 << 30), double(page) / (1 << 20));
  }
  I.pages_per_slot = 0;
  AllocateKv(o.count_rows, num_pages, o.max_context);
  I.layout.paged = true;
  PG_LOG_INFO("gpu: paged KV cache {} pages of {} tokens = {} tokens, {:.2f} GiB; arena {:.2f} "
              "GiB left",
              num_pages, ps, num_pages * ps, double(I.layout.bytes) / (1 << 30),
              double(I.arena.available()) / (1 << 30));
  // Capacity for the largest batch: max_seqs sequences of a whole context (+ padding rows).
  const int seqs = std::max(o.max_seqs, 1);
  I.plan.Reserve(std::max(seqs, options_.max_batch_tokens), options_.max_batch_tokens,
                 int64_t(seqs) * pages_per_seq + options_.max_batch_tokens);
  return I.layout;
}

const KvLayout& GpuRunner::kv_layout() const { return impl_->layout; }

void GpuRunner::SavePage(int64_t page, void* host) {
  Impl& I = *impl_;
  PG_ENSURE(page >= 0 && page < I.layout.num_pages - 1, kInvalidArgument,
            "save page {} outside [0, {})", page, I.layout.num_pages - 1);
  char* h = static_cast<char*>(host);
  const size_t bytes = size_t(I.layout.page_bytes) / (2 * I.kv.layers.size());
  for (const auto& v : I.kv.layers)
    for (const TensorView* t : {&v.k_cache, &v.v_cache}) {
      PG_CUDA_CHECK(cudaMemcpyAsync(h, static_cast<const char*>(t->data) + size_t(page) * bytes,
                                    bytes, cudaMemcpyDeviceToHost, stream_.get()));
      h += bytes;
    }
}

void GpuRunner::LoadPage(int64_t page, const void* host) {
  Impl& I = *impl_;
  PG_ENSURE(page >= 0 && page < I.layout.num_pages - 1, kInvalidArgument,
            "load page {} outside [0, {})", page, I.layout.num_pages - 1);
  const char* h = static_cast<const char*>(host);
  const size_t bytes = size_t(I.layout.page_bytes) / (2 * I.kv.layers.size());
  for (const auto& v : I.kv.layers)
    for (const TensorView* t : {&v.k_cache, &v.v_cache}) {
      PG_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(t->data) + size_t(page) * bytes, h, bytes,
                                    cudaMemcpyHostToDevice, stream_.get()));
      h += bytes;
    }
}

void GpuRunner::FillKvRandom(uint64_t seed) {
  for (const auto& v : impl_->kv.layers)
    for (const TensorView* t : {&v.k_cache, &v.v_cache})
      impl_->memory.FillRandom(t->data, t->dtype, t->numel(), 0.0f, 1.0f, seed++);
  PG_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}

void GpuRunner::Prepare(std::span<const StepSeq> seqs, int pad_to, int forced_max_kv_len) {
  Impl& I = *impl_;
  PG_CHECK(I.layout.num_slots > 0, "gpu runner: ConfigureKv first");
  const int num_seqs = std::max<int>(int(seqs.size()), pad_to);
  I.tokens.clear(), I.positions.clear(), I.q_start.clear(), I.q_len.clear(), I.kv_len.clear();
  I.page_start.clear(), I.page_table.clear(), I.rows.clear();
  const int64_t pad_page = I.layout.num_pages - 1;
  for (int s = 0; s < num_seqs; ++s) {
    const bool pad = s >= int(seqs.size());
    const StepSeq q = pad ? StepSeq{} : seqs[size_t(s)];
    const int len = pad ? 1 : int(q.tokens.size());
    if (!pad && !I.layout.paged) {
      PG_ENSURE(q.slot >= 0 && q.slot < I.layout.num_slots, kInvalidArgument,
                "slot {} outside [0, {})", q.slot, I.layout.num_slots);
    }
    if (!pad) {
      PG_ENSURE(len > 0 && q.start >= 0 && q.start + len <= I.layout.max_context, kOutOfRange,
                "sequence in slot {}: tokens [{}, {}) exceed the context of {}", q.slot, q.start,
                q.start + len, I.layout.max_context);
    }
    I.q_start.push_back(int32_t(I.tokens.size()));
    I.q_len.push_back(len);
    const int kvl = pad ? 1 : (forced_max_kv_len > 0 ? forced_max_kv_len : q.start + len);
    I.kv_len.push_back(kvl);
    I.page_start.push_back(int32_t(I.page_table.size()));
    if (pad) {
      I.page_table.push_back(int32_t(pad_page));
    } else if (I.layout.paged) {
      // The sequence's own pages for [0, kv length); the graphs read the table through
      // page_start, so its length may change between replays.
      const int64_t need = (int64_t(kvl) + options_.page_size - 1) / options_.page_size;
      PG_ENSURE(int64_t(q.pages.size()) >= need, kInvalidArgument,
                "sequence of {} tokens has {} pages of {} tokens", kvl, q.pages.size(),
                options_.page_size);
      for (int64_t p = 0; p < need; ++p) {
        const int32_t page = q.pages[size_t(p)];
        PG_ENSURE(page >= 0 && (page < pad_page || (paged_capture_ && page == pad_page)),
                  kInvalidArgument, "page {} outside [0, {})", page,
                  pad_page);
        I.page_table.push_back(page);
      }
    } else {
      // The slot's whole page list.
      for (int64_t p = 0; p < I.pages_per_slot; ++p)
        I.page_table.push_back(int32_t(q.slot * I.pages_per_slot + p));
    }
    for (int i = 0; i < len; ++i) {
      I.tokens.push_back(pad ? 0 : q.tokens[size_t(i)]);
      // Under a forced kv length (capture), every row sits at the end of its forced range.
      I.positions.push_back(pad ? 0 : (forced_max_kv_len > 0 ? kvl - len + i : q.start + i));
    }
    I.rows.push_back(int32_t(I.tokens.size()) - 1);
  }
  PG_ENSURE(int64_t(I.tokens.size()) <= options_.max_batch_tokens, kInvalidArgument,
            "step of {} tokens exceeds max_batch_tokens {}", I.tokens.size(),
            options_.max_batch_tokens);
  I.batch = {};
  I.batch.num_seqs = num_seqs;
  I.batch.page_size = options_.page_size;
  I.batch.q_start = I.q_start, I.batch.q_len = I.q_len, I.batch.kv_len = I.kv_len;
  I.batch.page_start = I.page_start, I.batch.page_table = I.page_table;
  const size_t n = I.tokens.size();
  int32_t* h = I.h_io.as<int32_t>();
  // The previous step's copies from the staging must be done before it is rewritten.
  PG_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  std::memcpy(h, I.tokens.data(), n * 4);
  std::memcpy(h + options_.max_batch_tokens, I.positions.data(), n * 4);
  PG_CUDA_CHECK(cudaMemcpyAsync(I.d_ids, h, n * 4, cudaMemcpyHostToDevice, stream_.get()));
  PG_CUDA_CHECK(cudaMemcpyAsync(I.d_pos, h + options_.max_batch_tokens, n * 4,
                                cudaMemcpyHostToDevice, stream_.get()));
  I.plan.Upload(I.batch, stream_.get());
  I.batch.device = &I.plan.view();
}

void GpuRunner::RunForward() {
  Impl& I = *impl_;
  const int64_t n = int64_t(I.tokens.size()), m = int64_t(I.rows.size());
  models::ForwardBatch fb;
  fb.tokens = I.tokens;
  fb.positions = I.positions;
  fb.attention = &I.batch;
  fb.logit_rows = I.rows;
  fb.device_tokens = TensorView::Contiguous(I.d_ids, DType::kI32, {n}, Device::kCuda);
  fb.device_positions = TensorView::Contiguous(I.d_pos, DType::kI32, {n}, Device::kCuda);
  TensorView logits = TensorView::Contiguous(I.d_logits, DType::kBF16,
                                             {m, I.model->config().vocab_size}, Device::kCuda);
  I.model->Forward(fb, I.kv, logits);
}

void GpuRunner::ReadLogits(std::span<float> logits, int num_seqs) {
  Impl& I = *impl_;
  const int64_t vocab = I.model->config().vocab_size;
  if (logits.empty()) return;
  PG_CHECK(int64_t(logits.size()) == num_seqs * vocab, "logits {} for {} x {}", logits.size(),
           num_seqs, vocab);
  const size_t bytes = size_t(num_seqs * vocab) * 2;
  PG_CUDA_CHECK(cudaMemcpyAsync(I.h_logits.data(), I.d_logits, bytes, cudaMemcpyDeviceToHost,
                                stream_.get()));
  PG_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  const uint16_t* src = I.h_logits.as<uint16_t>();
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = Bf16ToF32(src[i]);
}

void GpuRunner::ReadLogitsRow(int seq, std::span<float> out) {
  Impl& I = *impl_;
  const int64_t vocab = I.model->config().vocab_size;
  PG_ENSURE(seq >= 0 && seq < last_num_seqs_ && int64_t(out.size()) == vocab, kInvalidArgument,
            "logits row {} of {} ({} values for a vocab of {})", seq, last_num_seqs_, out.size(),
            vocab);
  uint16_t* h = I.h_logits.as<uint16_t>();
  PG_CUDA_CHECK(cudaMemcpyAsync(h, I.d_logits + int64_t(seq) * vocab, size_t(vocab) * 2,
                                cudaMemcpyDeviceToHost, stream_.get()));
  PG_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  for (int64_t i = 0; i < vocab; ++i) out[size_t(i)] = Bf16ToF32(h[i]);
}

void GpuRunner::Sample(std::span<const ops::SampleRow> rows, std::span<int32_t> tokens,
                       std::span<float> logprobs) {
  Impl& I = *impl_;
  const int n = last_num_seqs_;
  PG_ENSURE(n > 0 && int(rows.size()) == n && int(tokens.size()) == n &&
                (logprobs.empty() || int(logprobs.size()) == n),
            kInvalidArgument, "gpu sample: {} rows, {} tokens, {} logprobs for a step of {} sequences",
            rows.size(), tokens.size(), logprobs.size(), n);
  bool counts = false;
  for (const ops::SampleRow& r : rows) {
    PG_ENSURE(r.counts_row >= -1 && r.counts_row < I.layout.num_slots, kInvalidArgument,
              "gpu sample: counts_row {} outside [-1, {})", r.counts_row, I.layout.num_slots);
    counts = counts || r.counts_row >= 0;
  }
  const int64_t vocab = I.model->config().vocab_size;
  char* h = I.h_sample.as<char>();
  int32_t* h_tokens = reinterpret_cast<int32_t*>(h + size_t(options_.max_batch_tokens) * sizeof(ops::SampleRow));
  float* h_lp = reinterpret_cast<float*>(h_tokens + options_.max_batch_tokens);
  std::memcpy(h, rows.data(), rows.size_bytes());  // free: the previous Sample synchronised
  cudaStream_t s = stream_.get();
  PG_CUDA_CHECK(cudaMemcpyAsync(I.d_sample_rows, h, rows.size_bytes(), cudaMemcpyHostToDevice, s));
  ops::SampleParams p;
  p.logits = TensorView::Contiguous(I.d_logits, DType::kBF16, {n, vocab}, Device::kCuda);
  p.rows = TensorView::Contiguous(I.d_sample_rows, DType::kI32, {n, ops::kSampleRowWords}, Device::kCuda);
  if (counts) {
    p.token_counts = TensorView::Contiguous(I.d_counts, DType::kI32, {I.layout.num_slots, vocab},
                                            Device::kCuda);
    p.update_counts = true;
  }
  int32_t* d_tokens = I.d_sampled;
  float* d_lp = reinterpret_cast<float*>(I.d_sampled + options_.max_batch_tokens);
  p.tokens = TensorView::Contiguous(d_tokens, DType::kI32, {n}, Device::kCuda);
  if (!logprobs.empty()) p.logprobs = TensorView::Contiguous(d_lp, DType::kF32, {n}, Device::kCuda);
  {
    pg::cuda::StreamScope scope(s);
    ops::Sample(p);
  }
  PG_CUDA_CHECK(cudaMemcpyAsync(h_tokens, d_tokens, size_t(n) * 4, cudaMemcpyDeviceToHost, s));
  if (!logprobs.empty())
    PG_CUDA_CHECK(cudaMemcpyAsync(h_lp, d_lp, size_t(n) * 4, cudaMemcpyDeviceToHost, s));
  PG_CUDA_CHECK(cudaStreamSynchronize(s));
  std::memcpy(tokens.data(), h_tokens, size_t(n) * 4);
  if (!logprobs.empty()) std::memcpy(logprobs.data(), h_lp, size_t(n) * 4);
}

void GpuRunner::ResetTokenCounts(int slot, std::span<const int32_t> prompt) {
  Impl& I = *impl_;
  PG_ENSURE(slot >= 0 && slot < I.layout.num_slots, kInvalidArgument, "slot {} outside [0, {})",
            slot, I.layout.num_slots);
  const int64_t vocab = I.model->config().vocab_size;
  std::vector<int32_t> row(static_cast<size_t>(vocab), 0);
  for (int32_t t : prompt)
    if (t >= 0 && t < vocab) row[size_t(t)] = ops::kCountPromptBit;
  PG_CUDA_CHECK(cudaMemcpyAsync(I.d_counts + int64_t(slot) * vocab, row.data(), row.size() * 4,
                                cudaMemcpyHostToDevice, stream_.get()));
  PG_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}

void GpuRunner::Step(std::span<const StepSeq> seqs, std::span<float> logits) {
  last_num_seqs_ = int(seqs.size());
  Prepare(seqs, 0, 0);
  pg::cuda::StreamScope scope(stream_.get());
  RunForward();
  ReadLogits(logits, int(seqs.size()));
}

void GpuRunner::CaptureDecode(std::span<const int> batch_sizes, int max_kv_len,
                              std::span<const int> kv_buckets) {
  Impl& I = *impl_;
  PG_ENSURE(max_kv_len > 0 && max_kv_len <= I.layout.max_context, kInvalidArgument,
            "capture kv length {} outside (0, {}]", max_kv_len, I.layout.max_context);
  std::vector<int> sizes(batch_sizes.begin(), batch_sizes.end());
  std::sort(sizes.begin(), sizes.end());
  PG_ENSURE(!sizes.empty() && sizes.front() > 0 && sizes.back() <= I.layout.num_slots &&
                sizes.back() <= options_.max_batch_tokens,
            kInvalidArgument, "decode graph sizes must be in [1, {}]",
            std::min(I.layout.num_slots, options_.max_batch_tokens));
  std::vector<int> lens;
  for (int b : kv_buckets)
    if (b > 0 && b < max_kv_len) lens.push_back(b);
  lens.push_back(max_kv_len);
  std::sort(lens.begin(), lens.end());
  lens.erase(std::unique(lens.begin(), lens.end()), lens.end());
  I.graph_sets.clear();
  captured_max_kv_len_ = 0;
  // Longest first: the scratch buffers grow to their largest before any shorter capture.
  for (auto it = lens.rbegin(); it != lens.rend(); ++it) {
    DecodeGraphs graphs;
    CaptureDecodeSet(sizes, *it, graphs);
    I.graph_sets.emplace(I.graph_sets.begin(), *it, std::move(graphs));
  }
  I.staged_set = I.graph_sets.size() - 1;
  captured_max_kv_len_ = max_kv_len;
  captured_max_batch_ = sizes.back();
}

std::vector<int> GpuRunner::decode_kv_buckets() const {
  std::vector<int> v;
  for (const auto& [len, g] : impl_->graph_sets) v.push_back(len);
  return v;
}

void GpuRunner::CaptureDecodeSet(std::span<const int> sizes, int max_kv_len, DecodeGraphs& graphs) {
  Impl& I = *impl_;
  // Capture batches: slots 0..size-1, one token each, kv_len = max_kv_len (this fixes the
  // split-K layout to one that covers every shorter length). Writes land at position
  // max_kv_len - 1 of those slots (the caller's KV state there is clobbered).
  // Paged layout: every capture row reads and writes only the padding page.
  std::vector<int32_t> tok(static_cast<size_t>(sizes.back()), 0);
  std::vector<StepSeq> seqs;
  for (int s = 0; s < sizes.back(); ++s)
    seqs.push_back({s, max_kv_len - 1, std::span<const int32_t>(&tok[size_t(s)], 1)});
  std::vector<int32_t> pad_pages;
  if (I.layout.paged) {
    pad_pages.assign(size_t((max_kv_len + options_.page_size - 1) / options_.page_size),
                     int32_t(I.layout.num_pages - 1));
    for (StepSeq& q : seqs) q.pages = pad_pages;
    paged_capture_ = true;
  }
  pg::cuda::StreamScope scope(stream_.get());
  for (int size : sizes) {
    // The batch is staged and uploaded outside the capture (it synchronises); the graph then
    // records only the forward's kernels, which read the plan and io buffers at fixed
    // addresses. An eager run first grows the scratch buffers and builds cuBLASLt plans.
    Prepare(std::span<const StepSeq>(seqs.data(), size_t(size)), size, max_kv_len);
    RunForward();
    PG_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    const int one[] = {size};
    graphs.CaptureAll(stream_.get(), one, [&](int) { RunForward(); });
  }
  paged_capture_ = false;
}

void GpuRunner::Decode(std::span<const StepSeq> seqs, std::span<float> logits) {
  Impl& I = *impl_;
  PG_ENSURE(has_graphs(), kInvalidArgument, "gpu runner: no decode graphs captured");
  const int padded = I.graph_sets.back().second.PaddedSize(int(seqs.size()));
  PG_ENSURE(padded > 0, kInvalidArgument, "decode batch of {} exceeds every graph size",
            seqs.size());
  for (const StepSeq& q : seqs) {
    PG_ENSURE(q.tokens.size() == 1, kInvalidArgument, "decode steps take one token per sequence");
    PG_ENSURE(q.start + 1 <= captured_max_kv_len_, kOutOfRange,
              "decode at position {} beyond the captured kv length {}", q.start,
              captured_max_kv_len_);
    const int vocab = I.model->config().vocab_size;
    PG_ENSURE(q.tokens[0] >= 0 && q.tokens[0] < vocab, kOutOfRange,
              "token id {} outside vocab [0, {})", q.tokens[0], vocab);
  }
  last_num_seqs_ = int(seqs.size());
  int longest = 1;
  for (const StepSeq& q : seqs) longest = std::max(longest, q.start + 1);
  I.staged_set = 0;
  while (I.graph_sets[I.staged_set].first < longest) ++I.staged_set;  // the last holds every length
  Prepare(seqs, padded, 0);
  I.graph_sets[I.staged_set].second.Replay(padded, stream_.get());
  ReadLogits(logits, int(seqs.size()));
}

void GpuRunner::ReplayStaged(int padded_size) {
  Impl& I = *impl_;
  I.graph_sets[I.staged_set].second.Replay(padded_size, stream_.get());
}

}  // namespace pg::runtime::cuda
