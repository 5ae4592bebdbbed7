// The `peregrine` command's subcommands. Each Add*Command registers its options and a
// callback on the CLI11 app; errors surface as pg::Error and are printed by main().
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "engine/model_bundle.h"
#include "runtime/sampling_params.h"

namespace pg::cli {

// Options shared by every command that loads a model.
struct ModelFlags {
  std::string model = "embedded";
  std::string load_format = "auto";  // auto | dummy
  std::string dummy_dtype = "bf16";
  int threads = 0;                   // 0 = all hardware threads
  void Add(CLI::App& app);
  engine::BundleOptions ToBundleOptions() const;
  void ApplyThreads() const;
};

struct SamplingFlags {
  runtime::SamplingParams params;
  uint64_t seed = 0;
  bool has_seed = false;
  void Add(CLI::App& app);
  runtime::SamplingParams ToParams() const;
};

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
