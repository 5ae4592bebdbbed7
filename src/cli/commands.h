// The `peregrine` command's subcommands. Each Add*Command registers its options and a
// callback on the CLI11 app; errors surface as pg::Error and are printed by main().
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "engine/local_engine.h"
#include "engine/model_bundle.h"
#include "engine/step_executor.h"
#include "runtime/sampling_params.h"

namespace pg::cli {

// Options shared by every command that loads a model.
struct ModelFlags {
  std::string model = "embedded";
  std::string load_format = "auto";  // auto | dummy
  std::string dummy_dtype = "bf16";
  int threads = 0;                   // 0 = all hardware threads
  std::string tokenizer;             // tokenizer.json overriding the model's (dummy weights)
  void Add(CLI::App& app);
  engine::BundleOptions ToBundleOptions() const;
  void ApplyThreads() const;
};

// --device and the GPU options of commands that run the engine (serve, generate).
struct DeviceFlags {
  std::string device = "cpu";            // cpu | cuda
  double gpu_memory_utilization = 0.9;   // fraction of the GPU's memory for the arena
  std::string kv_dtype = "bf16";         // bf16 | fp8
  std::string weight_dtype = "bf16";     // bf16 | fp8 (dense projections)
  bool no_graphs = false;                // decode steps eager (A/B, debugging)
  void Add(CLI::App& app);
  bool cuda() const { return device == "cuda"; }
};

// A model loaded for --device cuda: the bundle (tokenizer, template; its `model` is null: the
// network lives in the executor) and the CUDA step executor, its KV pool sized and its decode
// graphs captured for `engine`'s context. CPU builds: throws kUnsupported.
struct DeviceModel {
  engine::ModelBundle bundle;
  std::string name;                              // bundle.name() before the model moved
  std::unique_ptr<engine::StepExecutor> executor;
  int64_t kv_bytes = 0;                          // the executor's KV pool
};
DeviceModel LoadOnDevice(const ModelFlags& model, const DeviceFlags& device,
                         const engine::EngineConfig& engine);

struct SamplingFlags {
  runtime::SamplingParams params;
  uint64_t seed = 0;
  bool has_seed = false;
  void Add(CLI::App& app);
  runtime::SamplingParams ToParams() const;
};

// --speculative-config's JSON (vLLM's keys: method "ngram", num_speculative_tokens,
// prompt_lookup_max, prompt_lookup_min); "" = off. Throws pg::Error naming the bad key.
scheduler::SpeculativeConfig ParseSpeculativeConfig(const std::string& json);

void AddGenerateCommand(CLI::App& app);
void AddChatCommand(CLI::App& app);
void AddBenchDecodeCommand(CLI::App& bench);
#ifdef PEREGRINE_HAVE_CUDA
void AddBenchGpuDecodeCommand(CLI::App& bench);   // CUDA builds only
void AddBenchGpuPrefillCommand(CLI::App& bench);  // CUDA builds only
#endif
void AddServeCommand(CLI::App& app);
void AddSimCommand(CLI::App& app);

}  // namespace pg::cli
