#include "engine/cpu_executor.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/status.h"

namespace pg::engine {

void PlanBatch::Build(const scheduler::Plan& plan, int P) {
  for (auto* v : {&tokens, &positions, &q_start, &q_len, &kv_len, &page_start, &page_table, &rows})
    v->clear();
  for (const scheduler::PlanEntry& e : plan.entries) {
    q_start.push_back(int32_t(tokens.size()));
    q_len.push_back(e.num_tokens);
    kv_len.push_back(e.first_position + e.num_tokens);
    page_start.push_back(int32_t(page_table.size()));
    const int32_t num_pages = (e.first_position + e.num_tokens + P - 1) / P;
    PG_CHECK(int32_t(e.page_table.size()) >= num_pages, "plan page table too short");
    page_table.insert(page_table.end(), e.page_table.begin(), e.page_table.begin() + num_pages);
    tokens.insert(tokens.end(), e.input_tokens.begin(), e.input_tokens.end());
    for (int32_t i = 0; i < e.num_tokens; ++i) positions.push_back(e.first_position + i);
    for (int32_t i = e.num_sample; i > 0; --i) rows.push_back(int32_t(tokens.size()) - i);
  }
}

ops::AttentionBatch PlanBatch::View(int P) const {
  return {.num_seqs = int(q_start.size()), .page_size = P, .q_start = q_start, .q_len = q_len,
          .kv_len = kv_len, .page_start = page_start, .page_table = page_table};
}

CpuStepExecutor::CpuStepExecutor(models::Model& model, const CpuExecutorOptions& o)
    : model_(model), options_(o) {
  const int64_t page_bytes = model.kv_spec().BytesPerToken(DType::kF32) * o.page_size;
  num_pages_ = int(std::min<int64_t>(o.kv_cache_bytes / page_bytes, INT32_MAX / 2));
  num_host_pages_ = int(std::min<int64_t>(o.host_cache_bytes / page_bytes, INT32_MAX / 2));
  PG_ENSURE(num_pages_ >= 2, kInvalidArgument,
            "KV cache of {} bytes holds fewer than 2 pages of {} bytes; raise --kv-cache-mib",
            o.kv_cache_bytes, page_bytes);
  kv_ = std::make_unique<runtime::KvStorage>(model.kv_spec(), num_pages_, o.page_size);
  host_pages_.resize(size_t(num_host_pages_) * size_t(page_bytes));
  logits_ = Tensor(DType::kF32, {o.max_rows, model.config().vocab_size});
  // (max_rows: sampled positions per step, drafts included; checked per step below.)
}

std::string CpuStepExecutor::Describe() const {
  return fmt::format("KV capacity {} pages = {} tokens", num_pages_,
                     int64_t(num_pages_) * options_.page_size);
}

void CpuStepExecutor::Execute(const scheduler::Plan& plan,
                              std::span<runtime::SamplerState* const> samplers,
                              std::vector<runtime::SampledToken>* out) {
  const int64_t page_bytes = kv_->PageBytes();
  for (const cache::CopyOp& op : plan.copies) {
    uint8_t* host = host_pages_.data() + size_t(op.host_slot) * size_t(page_bytes);
    if (op.kind == cache::CopyKind::kDeviceToHost) kv_->SavePage(op.device_page, host);
    else kv_->LoadPage(op.device_page, host);
  }
  if (plan.entries.empty()) return;
  const int P = options_.page_size;
  batch_.Build(plan, P);
  const ops::AttentionBatch batch = batch_.View(P);
  PG_CHECK(int64_t(batch_.rows.size()) <= options_.max_rows, "{} sampled rows, room for {}",
           batch_.rows.size(), options_.max_rows);
  TensorView logits = logits_.view().Slice0(0, int64_t(batch_.rows.size()));
  model_.Forward({.tokens = batch_.tokens, .positions = batch_.positions, .attention = &batch,
                  .logit_rows = batch_.rows},
                 kv_->layers(), logits);
  const int vocab = model_.config().vocab_size;
  size_t r = 0;
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    const scheduler::PlanEntry& e = plan.entries[i];
    if (e.num_sample == 0) continue;
    float* row = logits.as<float>() + int64_t(r) * vocab;
    r += size_t(e.num_sample);
    runtime::SampleSpeculative({row, size_t(e.num_sample) * size_t(vocab)}, vocab,
                               e.input_tokens.subspan(1, size_t(e.num_draft)), *samplers[i], out);
  }
}

}  // namespace pg::engine
