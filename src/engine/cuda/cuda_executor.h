// The CUDA step executor: the engine's plans run on one GPU through runtime::cuda::GpuRunner
// in its paged layout (GpuRunner::ConfigurePagedKv):
//  * KV pages in the runner's arena, indexed by the scheduler's own page ids: each step's
//    page tables travel to the device with the batch plan; the pool takes what the arena has
//    left after the weights (--gpu-memory-utilization), reported at start-up;
//  * the host tier: pinned RAM, pages copied with cudaMemcpyAsync in stream order;
//  * pure decode steps replay CUDA graphs (padded batch sizes, captured for the whole served
//    context; inputs in the runner's fixed device buffers); prefill and mixed steps run eager;
//  * sampling on the device (ops::Sample, the host sampler's algorithm and RNG: the same tokens
//    for the same seed); penalties from per-request token-count rows on the device. A request
//    asking for top logprobs (or with penalties when no count row is free) is sampled on the
//    host from its row of logits, copied back.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/step_executor.h"
#include "models/model.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/cuda/gpu_runner.h"

namespace pg::engine::cuda {

struct CudaExecutorOptions {
  double gpu_memory_utilization = 0.9;
  DType kv_dtype = DType::kBF16;       // kBF16 or kF8E4M3
  DType weight_dtype = DType::kBF16;   // dense projections: kBF16 or kF8E4M3
  int page_size = 16;                  // tokens per KV page (the engine's)
  int max_step_tokens = 2048;          // tokens of one step (the engine's budget)
  int max_running = 64;                // sequences of one step (the engine's running limit)
  int64_t host_cache_bytes = 0;        // pinned host tier; 0 = off
  int64_t kv_reserve_bytes = 0;        // arena bytes left free after the KV pool
  int64_t max_kv_pages = 0;            // > 0: a pool of exactly this many pages (tests)
  bool graphs = true;                  // decode steps through CUDA graphs
  std::vector<int> graph_sizes;        // padded decode batch sizes; empty = 1, 2, 4, ... max_running
  // Decode graphs are captured once per kv length here below the model's context (and once
  // at it), so a step whose longest sequence fits a bucket replays an attention plan made
  // for that length (GpuRunner::CaptureDecode); empty = one set at the full context.
  std::vector<int> graph_kv_buckets{std::begin(runtime::cuda::kDefaultDecodeKvBuckets),
                                    std::end(runtime::cuda::kDefaultDecodeKvBuckets)};
  uint64_t dummy_seed = 0;
};

class CudaStepExecutor final : public StepExecutor {
 public:
  // Creates the runner and its device arena (no model yet).
  explicit CudaStepExecutor(const CudaExecutorOptions& options);
  ~CudaStepExecutor() override;

  // Loads a model onto this executor's device (engine::BundleOptions::load_model): HF / GGUF
  // weights read on the host, then placed; --load-format dummy: random weights of the
  // config's shapes made on the device. Throws kUnsupported for architectures without a
  // device path.
  std::unique_ptr<models::Model> LoadModel(const models::LoadOptions& options);
  // Takes the placed model (it must die before the runner), sizes the KV pool from what the
  // arena has left and captures the decode graphs for kv lengths up to `max_context`.
  void Attach(std::unique_ptr<models::Model> model, int max_context);

  const models::ModelConfig& model_config() const override { return model_->config(); }
  int num_device_pages() const override { return num_pages_; }
  int num_host_pages() const override { return num_host_pages_; }
  std::string Describe() const override;
  void BeginRequest(uint64_t id, const runtime::SamplingParams& params,
                    std::span<const int32_t> prompt) override;
  void EndRequest(uint64_t id) override;
  void Execute(const scheduler::Plan& plan, std::span<runtime::SamplerState* const> samplers,
               std::vector<runtime::SampledToken>* out) override;

  runtime::cuda::GpuRunner& runner() { return *runner_; }
  int64_t graph_steps() const { return graph_steps_; }
  int64_t eager_steps() const { return eager_steps_; }

 private:
  // The device count row of request `id` for this step: allocated (and reset to its prompt)
  // at its first sample when it has penalties and a row is free; -1 = none.
  int CountsRow(uint64_t id);

  CudaExecutorOptions options_;
  std::unique_ptr<runtime::cuda::GpuRunner> runner_;
  std::unique_ptr<models::Model> model_;  // after runner_: destroyed first
  int max_context_ = 0;
  int num_pages_ = 0;
  int num_host_pages_ = 0;
  runtime::cuda::PinnedBuffer host_tier_;
  // Penalty count rows: free list; request -> row; prompts of requests without one yet.
  std::vector<int> free_rows_;
  std::unordered_map<uint64_t, int> rows_of_;
  std::unordered_map<uint64_t, std::vector<int32_t>> pending_prompts_;
  // Step buffers (capacity reused).
  std::vector<runtime::cuda::StepSeq> seqs_;
  std::vector<ops::SampleRow> sample_rows_;
  std::vector<int32_t> sampled_;
  std::vector<float> logprobs_, host_row_;
  std::vector<char> on_host_;
  int64_t graph_steps_ = 0, eager_steps_ = 0;
};

}  // namespace pg::engine::cuda
