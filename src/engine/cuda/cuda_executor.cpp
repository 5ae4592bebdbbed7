#include "engine/cuda/cuda_executor.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/log.h"
#include "core/status.h"
#include "kernels/cuda/common/cuda_check.h"
#include "models/loader.h"
#include "runtime/cuda/gpu_decode_bench.h"

namespace pg::engine::cuda {
namespace rt = runtime::cuda;

namespace {

std::vector<int> DefaultGraphSizes(int max_running, int max_step_tokens) {
  const int top = std::min(max_running, max_step_tokens);
  std::vector<int> sizes;
  for (int s = 1; s < top; s *= 2) sizes.push_back(s);
  sizes.push_back(top);
  return sizes;
}

}  // namespace

CudaStepExecutor::CudaStepExecutor(const CudaExecutorOptions& o) : options_(o) {
  PG_ENSURE(o.max_running > 0 && o.max_step_tokens > 0 && o.page_size > 0, kInvalidArgument,
            "cuda executor: max_running {}, max_step_tokens {}, page_size {} must be > 0",
            o.max_running, o.max_step_tokens, o.page_size);
  runner_ = std::make_unique<rt::GpuRunner>(rt::GpuRunnerOptions{
      .gpu_memory_utilization = o.gpu_memory_utilization,
      .max_batch_tokens = std::max(o.max_step_tokens, o.max_running),
      .page_size = o.page_size,
      .kv_dtype = o.kv_dtype});
}

CudaStepExecutor::~CudaStepExecutor() {
  if (runner_) cudaStreamSynchronize(runner_->stream());
}

std::unique_ptr<models::Model> CudaStepExecutor::LoadModel(const models::LoadOptions& lo) {
  const models::DevicePlacement placement{
      .max_batch_tokens = std::max(options_.max_step_tokens, options_.max_running),
      .weight_dtype = options_.weight_dtype};
  std::unique_ptr<models::Model> m;
  if (lo.format == models::LoadFormat::kDummy) {
    m = rt::CreateDummyOnDevice(lo.path, runner_->memory(), placement, options_.dummy_seed);
  } else {
    m = models::LoadModel(lo);
    m->PlaceOnDevice(runner_->memory(), placement);  // kUnsupported: no device path
  }
  PG_CUDA_CHECK(cudaStreamSynchronize(runner_->stream()));
  return m;
}

void CudaStepExecutor::Attach(std::unique_ptr<models::Model> model, int max_context) {
  PG_CHECK(model != nullptr && !model_, "cuda executor: attach one model");
  PG_ENSURE(max_context > 0, kInvalidArgument, "cuda executor: context {}", max_context);
  model_ = std::move(model);
  max_context_ = max_context;
  runner_->Attach(*model_);
  const rt::KvLayout& layout = runner_->ConfigurePagedKv(
      {.num_pages = options_.max_kv_pages, .reserve_bytes = options_.kv_reserve_bytes,
       .count_rows = options_.max_running, .max_seqs = options_.max_running,
       .max_context = max_context});
  num_pages_ = int(std::min<int64_t>(layout.num_pages - 1, INT32_MAX / 2));
  num_host_pages_ = int(std::min<int64_t>(options_.host_cache_bytes / layout.page_bytes, INT32_MAX / 2));
  if (num_host_pages_ > 0)
    host_tier_ = rt::PinnedBuffer(size_t(num_host_pages_) * size_t(layout.page_bytes));
  free_rows_.clear();
  for (int r = options_.max_running - 1; r >= 0; --r) free_rows_.push_back(r);
  if (options_.graphs) {
    std::vector<int> sizes = options_.graph_sizes.empty()
                                 ? DefaultGraphSizes(options_.max_running, options_.max_step_tokens)
                                 : options_.graph_sizes;
    for (int& s : sizes) s = std::clamp(s, 1, std::min(options_.max_running, options_.max_step_tokens));
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    runner_->CaptureDecode(sizes, max_context, options_.graph_kv_buckets);
    PG_LOG_INFO("gpu: decode graphs for batch sizes {}, one set per kv length bucket {}",
                fmt::join(sizes, ","), fmt::join(runner_->decode_kv_buckets(), ","));
  }
}

std::string CudaStepExecutor::Describe() const {
  return fmt::format("GPU KV capacity {} pages = {} tokens ({} KV, {:.2f} GiB); host tier {} "
                     "pages; decode graphs {}",
                     num_pages_, int64_t(num_pages_) * options_.page_size,
                     options_.kv_dtype == DType::kF8E4M3 ? "fp8" : "bf16",
                     double(runner_->kv_layout().bytes) / (1 << 30), num_host_pages_,
                     runner_->has_graphs() ? "on" : "off");
}

void CudaStepExecutor::BeginRequest(uint64_t id, const runtime::SamplingParams& params,
                                    std::span<const int32_t> prompt) {
  if (params.has_penalties()) pending_prompts_[id].assign(prompt.begin(), prompt.end());
}

void CudaStepExecutor::EndRequest(uint64_t id) {
  pending_prompts_.erase(id);
  if (auto it = rows_of_.find(id); it != rows_of_.end()) {
    free_rows_.push_back(it->second);
    rows_of_.erase(it);
  }
}

int CudaStepExecutor::CountsRow(uint64_t id) {
  if (auto it = rows_of_.find(id); it != rows_of_.end()) return it->second;
  auto p = pending_prompts_.find(id);
  if (p == pending_prompts_.end() || free_rows_.empty()) return -1;
  const int row = free_rows_.back();
  free_rows_.pop_back();
  runner_->ResetTokenCounts(row, p->second);
  rows_of_[id] = row;
  pending_prompts_.erase(p);
  return row;
}

void CudaStepExecutor::Execute(const scheduler::Plan& plan,
                               std::span<runtime::SamplerState* const> samplers,
                               std::vector<runtime::SampledToken>* out) {
  const int64_t page_bytes = runner_->kv_layout().page_bytes;
  for (const cache::CopyOp& op : plan.copies) {
    PG_CHECK(op.host_slot >= 0 && op.host_slot < num_host_pages_, "host slot {} of {}",
             op.host_slot, num_host_pages_);
    char* host = host_tier_.as<char>() + size_t(op.host_slot) * size_t(page_bytes);
    if (op.kind == cache::CopyKind::kDeviceToHost) runner_->SavePage(op.device_page, host);
    else runner_->LoadPage(op.device_page, host);
  }
  if (plan.entries.empty()) {
    PG_CUDA_CHECK(cudaStreamSynchronize(runner_->stream()));
    return;
  }
  const size_t n = plan.entries.size();
  PG_CHECK(samplers.size() == n, "{} samplers for {} entries", samplers.size(), n);
  for (const scheduler::PlanEntry& e : plan.entries)
    PG_ENSURE(e.num_draft == 0, kUnsupported,
              "speculative decoding is not supported by the CUDA executor yet");
  // Sampling decisions first: a new count row is reset (a synchronous copy) before the step.
  sample_rows_.assign(n, ops::SampleRow{});
  on_host_.assign(n, 0);
  bool want_logprobs = false;
  for (size_t i = 0; i < n; ++i) {
    ops::SampleRow& row = sample_rows_[i];
    runtime::SamplerState* st = samplers[i];
    if (st == nullptr) {  // a prefill chunk that does not sample: a discarded greedy draw
      row.temperature = 0.0f;
      continue;
    }
    const runtime::SamplingParams& p = st->params();
    row = st->Row();
    row.counts_row = p.has_penalties() ? CountsRow(plan.entries[i].id) : -1;
    // On the host: top logprobs, penalties without a counts row, JSON mode (its mask) and
    // logit_bias.
    on_host_[i] = p.top_logprobs > 0 || (p.has_penalties() && row.counts_row < 0) ||
                  p.token_table != nullptr || !p.logit_bias.empty();
    if (on_host_[i]) row = ops::SampleRow{.temperature = 0.0f};
    want_logprobs = want_logprobs || (!on_host_[i] && p.top_logprobs >= 0);
  }
  // The forward: a captured graph for pure decode steps that fit one, else eager.
  seqs_.clear();
  bool decode = options_.graphs && runner_->has_graphs() && int(n) <= runner_->max_graph_batch();
  for (const scheduler::PlanEntry& e : plan.entries) {
    seqs_.push_back({.slot = 0, .start = e.first_position, .tokens = e.input_tokens,
                     .pages = e.page_table});
    decode = decode && e.num_tokens == 1;
  }
  if (decode) {
    runner_->Decode(seqs_, {});
    ++graph_steps_;
  } else {
    runner_->Step(seqs_, {});
    ++eager_steps_;
  }
  sampled_.resize(n);
  logprobs_.resize(want_logprobs ? n : 0);
  runner_->Sample(sample_rows_, sampled_, logprobs_);
  const int vocab = model_->config().vocab_size;
  for (size_t i = 0; i < n; ++i) {
    runtime::SamplerState* st = samplers[i];
    if (st == nullptr) continue;
    if (on_host_[i]) {
      host_row_.resize(size_t(vocab));
      runner_->ReadLogitsRow(int(i), host_row_);
      // A row with NaN / inf logits samples garbage: say so (the host path is where a mask
      // would hide it behind a plausible-looking token).
      const size_t bad = size_t(std::count_if(host_row_.begin(), host_row_.end(),
                                              [](float v) { return !std::isfinite(v); }));
      if (bad > 0)
        PG_LOG_WARN("request {}: {} of {} logits are not finite (step {}, row {} of {})",
                    plan.entries[i].id, bad, host_row_.size(), plan.step, i, n);
      out->push_back(runtime::Sample(host_row_, *st));  // advances the state
      continue;
    }
    runtime::SampledToken t;
    t.token = sampled_[i];
    if (st->params().top_logprobs >= 0) t.logprob = logprobs_[i];
    st->Accept(t.token);
    out->push_back(std::move(t));
  }
}

}  // namespace pg::engine::cuda
