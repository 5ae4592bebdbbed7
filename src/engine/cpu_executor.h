// The CPU step executor: the model's host forward over KV pages in RAM (runtime::KvStorage),
// a host tier of plain RAM, and the host sampler. The engine's behaviour before the executor
// seam, unchanged.
#pragma once

#include <memory>
#include <vector>

#include "core/tensor.h"
#include "engine/step_executor.h"
#include "models/model.h"
#include "runtime/kv_storage.h"

namespace pg::engine {

struct CpuExecutorOptions {
  int page_size = 16;             // tokens per KV page
  int64_t kv_cache_bytes = 0;     // RAM for device-tier pages (f32 KV)
  int64_t host_cache_bytes = 0;   // RAM for the host tier; 0 = off
  int max_rows = 64;              // sampled rows per step: running limit x (1 + drafts)
};

// Batch metadata of a plan for Model::Forward, shared by the executors: entry e's tokens at
// rows [q_start[e], q_start[e] + q_len[e]), its pages page_table[page_start[e] ...] (those of
// positions [0, first_position + num_tokens)), and `rows` the rows of every entry's sampled
// positions (its last num_sample rows). Buffers keep their capacity across steps.
struct PlanBatch {
  std::vector<int32_t> tokens, positions, q_start, q_len, kv_len, page_start, page_table, rows;
  void Build(const scheduler::Plan& plan, int page_size);
  ops::AttentionBatch View(int page_size) const;
};

class CpuStepExecutor final : public StepExecutor {
 public:
  // `model` outlives the executor. Throws kInvalidArgument when fewer than 2 pages fit.
  CpuStepExecutor(models::Model& model, const CpuExecutorOptions& options);
  const models::ModelConfig& model_config() const override { return model_.config(); }
  int num_device_pages() const override { return num_pages_; }
  int num_host_pages() const override { return num_host_pages_; }
  std::string Describe() const override;
  void Execute(const scheduler::Plan& plan, std::span<runtime::SamplerState* const> samplers,
               std::vector<runtime::SampledToken>* out) override;

 private:
  models::Model& model_;
  CpuExecutorOptions options_;
  int num_pages_ = 0;
  int num_host_pages_ = 0;
  std::unique_ptr<runtime::KvStorage> kv_;
  std::vector<uint8_t> host_pages_;
  Tensor logits_;
  PlanBatch batch_;
};

}  // namespace pg::engine
