// The engine's step executor: runs one scheduler plan on a device. The engine loop owns the
// scheduler and the per-request sampler states; an executor owns the model's KV pages (the
// scheduler's page ids index them), the host tier's page slots, and the forward pass.
//
// One step (Execute):
//   1. plan.copies in order (device page <-> host tier slot; see cache/kv_cache.h);
//   2. one forward over plan.entries (decode entries first, then prefill chunks);
//   3. a token for every entry with num_sample == 1, drawn with that entry's SamplerState
//      (advanced: Accept), in plan order.
// Implementations: CpuStepExecutor (cpu_executor.h) and, in CUDA builds, CudaStepExecutor
// (engine/cuda/cuda_executor.h). Only the engine loop thread calls an executor.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "models/config.h"
#include "runtime/sampler.h"
#include "scheduler/plan.h"

namespace pg::engine {

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  virtual const models::ModelConfig& model_config() const = 0;
  // KV pages on the device (the scheduler's page ids are [0, num_device_pages())) and host
  // tier slots ([0, num_host_pages())); fixed for the executor's lifetime.
  virtual int num_device_pages() const = 0;
  virtual int num_host_pages() const = 0;
  // One line for the start-up log ("KV capacity ...").
  virtual std::string Describe() const = 0;
  // A request entered / left the engine (device-side per-request state, e.g. penalty counts).
  virtual void BeginRequest(uint64_t id, const runtime::SamplingParams& params,
                            std::span<const int32_t> prompt) {
    (void)id, (void)params, (void)prompt;
  }
  virtual void EndRequest(uint64_t id) { (void)id; }
  // samplers[i]: the SamplerState of plan.entries[i] (null when its num_sample == 0). `out`
  // receives one SampledToken per sampling entry, in plan order (logprob and top alternatives
  // when the request's params ask for them).
  virtual void Execute(const scheduler::Plan& plan,
                       std::span<runtime::SamplerState* const> samplers,
                       std::vector<runtime::SampledToken>* out) = 0;
};

}  // namespace pg::engine
