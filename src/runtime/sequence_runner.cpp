#include "runtime/sequence_runner.h"

#include <algorithm>
#include <numeric>

#include "core/status.h"

namespace pg::runtime {

SequenceRunner::SequenceRunner(models::Model& model, SequenceRunnerOptions options)
    : model_(model), options_(options) {
  if (options_.max_context <= 0) options_.max_context = model.config().max_context;
  const int pages = (options_.max_context + options_.page_size - 1) / options_.page_size;
  kv_ = std::make_unique<KvStorage>(model.kv_spec(), pages, options_.page_size);
  page_table_.resize(size_t(pages));
  std::iota(page_table_.begin(), page_table_.end(), 0);
  logits_ = Tensor(DType::kF32, {1, model.config().vocab_size});
}

void SequenceRunner::Truncate(int length) {
  PG_CHECK(length >= 0 && length <= length_);
  length_ = length;
}

std::span<float> SequenceRunner::Append(std::span<const int32_t> tokens) {
  PG_ENSURE(!tokens.empty(), kInvalidArgument, "nothing to run: empty token list");
  PG_ENSURE(length_ + int64_t(tokens.size()) <= options_.max_context, kOutOfRange,
            "sequence of {} tokens exceeds the context of {} tokens",
            length_ + int64_t(tokens.size()), options_.max_context);
  std::vector<int32_t> positions;
  for (size_t done = 0; done < tokens.size();) {
    const int n = int(std::min<size_t>(size_t(options_.prefill_chunk), tokens.size() - done));
    positions.resize(size_t(n));
    std::iota(positions.begin(), positions.end(), length_);
    const int32_t q_start = 0, q_len = n, kv_len = length_ + n, page_start = 0;
    ops::AttentionBatch batch{.num_seqs = 1, .page_size = options_.page_size,
                              .q_start = {&q_start, 1}, .q_len = {&q_len, 1},
                              .kv_len = {&kv_len, 1}, .page_start = {&page_start, 1},
                              .page_table = page_table_};
    const int32_t last_row = n - 1;
    models::ForwardBatch fb{.tokens = tokens.subspan(done, size_t(n)), .positions = positions,
                            .attention = &batch, .logit_rows = {&last_row, 1}};
    model_.Forward(fb, kv_->layers(), logits_.view());
    length_ += n;
    done += size_t(n);
  }
  return {logits_.data<float>(), size_t(model_.config().vocab_size)};
}

std::vector<int32_t> Generate(SequenceRunner& runner, std::span<const int32_t> prompt,
                              SamplerState& sampler, const GenerateOptions& o,
                              const std::function<void(int32_t)>& on_token) {
  std::vector<int32_t> out;
  if (o.max_new_tokens <= 0) return out;
  std::span<float> logits = runner.Append(prompt);
  for (;;) {
    SampledToken t = Sample(logits, sampler);
    out.push_back(t.token);
    if (on_token) on_token(t.token);
    if (std::find(o.stop_ids.begin(), o.stop_ids.end(), t.token) != o.stop_ids.end()) break;
    if (int(out.size()) >= o.max_new_tokens || runner.length() >= runner.max_context()) break;
    logits = runner.Append({&out.back(), 1});
  }
  return out;
}

}  // namespace pg::runtime
