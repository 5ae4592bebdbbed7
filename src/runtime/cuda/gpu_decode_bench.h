// `peregrine bench gpu-decode`: decode time per output token of a device-resident model
// through CUDA graphs, held against the HBM floor measured in the same run:
//   floor = (weight bytes streamed per step + KV bytes read per step) / HBM bandwidth
// where the bandwidth is that of a device-to-device copy (read + write bytes / time). For MoE
// models the weight bytes are those the measured step touched: dense weights, shared experts,
// lm_head, plus each layer's distinct routed experts (Model::last_forward_weight_bytes).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "models/model.h"
#include "runtime/cuda/gpu_runner.h"
#include "runtime/cuda/op_profiler.h"

namespace pg::runtime::cuda {

// A dummy model of the shapes of `path` (a config.json or its folder) made on `mem`'s device:
// the llama family, or the MoE architectures (DeepSeek fp8 when the config declares fp8).
std::unique_ptr<models::Model> CreateDummyOnDevice(const std::string& path,
                                                   models::DeviceMemory& mem,
                                                   const models::DevicePlacement& placement,
                                                   uint64_t seed);

// A model on one GPU for a benchmark: `path` is a config.json or its folder (dummy: random
// weights of that shape made on the device) or a GGUF / HF folder (loaded, then placed).
// Placed with activation scratch for options.max_batch_tokens and attached to the runner.
// Member order matters: the model (whose weights live in the runner's arena) goes first.
struct BenchModel {
  std::unique_ptr<GpuRunner> runner;
  std::unique_ptr<models::Model> model;
};
BenchModel PlaceBenchModel(const std::string& path, bool dummy, const GpuRunnerOptions& options,
                           uint64_t seed, DType weight_dtype = DType::kBF16);

struct GpuDecodeBenchOptions {
  std::string model;                 // config.json / folder (dummy), or a GGUF / HF folder
  bool dummy = true;                 // random weights made on the device
  std::vector<int> batches{1, 8, 32};
  std::vector<int> contexts{1024, 32768};
  double gpu_memory_utilization = 0.9;
  int iters = 30;                    // timed graph replays per point
  int page_size = 16;
  DType kv_dtype = DType::kBF16;     // KV cache: bf16 or fp8 e4m3 (--kv-dtype)
  DType weight_dtype = DType::kBF16; // dense projections: bf16 or fp8 e4m3 (--weight-dtype)
  uint64_t seed = 1;
  bool profile = false;              // per-op GPU times of one eager step per point (--profile)
  // Measurement only (--skip-op): sets of ops (registry names joined by '+') each left out of
  // a graph captured after the full step's measurements; its back-to-back replay time next to
  // the full graph's is the set's in-graph cost (by difference, same process and KV). Eager
  // steps run every op first, so what a skipped op leaves behind is a real step's output.
  std::vector<std::string> skip_ops;
  // > 0 (--capture-context): the graphs are captured as the engine captures them, for kv
  // lengths up to this with kv_buckets (--kv-buckets; default kDefaultDecodeKvBuckets, 0: none),
  // and the step replays the set its context falls in; 0: one set at the point's context.
  int capture_context = 0;
  std::vector<int> kv_buckets{std::begin(kDefaultDecodeKvBuckets), std::end(kDefaultDecodeKvBuckets)};
};

struct GpuDecodeBenchRow {
  int batch = 0, context = 0;
  bool fits = false;
  std::string note;                  // why a point was skipped
  double graph_step_us = 0;          // back-to-back graph replays, per step
  double loop_step_us = 0;           // Decode() + device Sample() per step: staging, graph,
                                     // sampling (temperature 0.8, top_p 0.9), token read-back
  double eager_step_us = 0;          // the same forward without graphs
  double weight_bytes = 0;           // weights read by the step (MoE: experts touched)
  double bytes_per_step = 0;         // weights streamed + KV read
  double floor_us = 0;               // bytes_per_step / HBM bandwidth
  std::vector<OpTime> profile;       // --profile: per op name, descending GPU time
  std::vector<OpTime> profile_calls; // --profile: the step's first ops in order
  std::vector<std::pair<std::string, double>> skip_graph_us;  // --skip-op: set, graph µs
  int graph_kv_len = 0;              // kv length the replayed graph set was captured for
  double ratio() const { return graph_step_us > 0 ? floor_us / graph_step_us : 0; }
};

struct GpuDecodeBenchReport {
  std::string model;
  double hbm_bytes_per_s = 0;        // measured in this run
  int64_t streamed_weight_bytes = 0;
  int64_t kv_bytes_per_token = 0;
  std::vector<GpuDecodeBenchRow> rows;
};

GpuDecodeBenchReport RunGpuDecodeBench(const GpuDecodeBenchOptions& options,
                                       const std::function<void(const GpuDecodeBenchRow&)>& on_row = {});
std::string FormatGpuDecodeRow(const GpuDecodeBenchRow& row);
std::string FormatGpuDecodeHeader(const GpuDecodeBenchReport& report);
// The row's --profile tables (empty when not profiled).
std::string FormatGpuDecodeProfile(const GpuDecodeBenchRow& row);

}  // namespace pg::runtime::cuda
