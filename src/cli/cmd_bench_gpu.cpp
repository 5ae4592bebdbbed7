// `peregrine bench gpu-decode`: decode time per output token of a dense model on one GPU
// through CUDA graphs, against the HBM floor measured in the same run (CUDA builds only;
// see runtime/cuda/gpu_decode_bench.h for the floor's definition).
//   peregrine bench gpu-decode --model configs/llama-3.1-8b/config.json --load-format dummy
//       --batch 1,8,32 --context 1024,32768
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/status.h"
#include "runtime/cuda/gpu_decode_bench.h"

namespace pg::cli {

void AddBenchGpuDecodeCommand(CLI::App& bench) {
  struct Flags {
    runtime::cuda::GpuDecodeBenchOptions o;
    std::string load_format = "dummy";
    std::string kv_dtype = "bf16";
    std::string json_out;
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* cmd = bench.add_subcommand(
      "gpu-decode", "decode time per token on the GPU (CUDA graphs) vs the HBM floor");
  cmd->add_option("--model", flags->o.model,
                  "config.json or folder (--load-format dummy), GGUF file or HF folder")
      ->required();
  cmd->add_option("--load-format", flags->load_format, "dummy | auto")
      ->check(CLI::IsMember({"dummy", "auto"}));
  cmd->add_option("--batch", flags->o.batches, "batch sizes (sequences per step)")
      ->delimiter(',');
  cmd->add_option("--context", flags->o.contexts, "context lengths (tokens per sequence)")
      ->delimiter(',');
  cmd->add_option("--gpu-memory-utilization", flags->o.gpu_memory_utilization,
                  "fraction of the GPU's memory the arena may take")
      ->check(CLI::Range(0.01, 1.0));
  cmd->add_option("--iters", flags->o.iters, "timed steps per point")->check(CLI::PositiveNumber);
  cmd->add_option("--page-size", flags->o.page_size, "KV page size (tokens)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--kv-dtype", flags->kv_dtype, "KV cache element type: bf16 | fp8 (e4m3)")
      ->check(CLI::IsMember({"bf16", "fp8"}));
  cmd->add_option("--json", flags->json_out, "also write the results as JSON here");
  cmd->callback([flags] {
    flags->o.dummy = flags->load_format == "dummy";
    flags->o.kv_dtype = flags->kv_dtype == "fp8" ? DType::kF8E4M3 : DType::kBF16;
    auto print = [](const runtime::cuda::GpuDecodeBenchRow& r) {
      std::printf("%s\n", runtime::cuda::FormatGpuDecodeRow(r).c_str());
      std::fflush(stdout);
    };
    // Rows print as they are measured (progress), then the whole table with its header.
    const runtime::cuda::GpuDecodeBenchReport report =
        runtime::cuda::RunGpuDecodeBench(flags->o, print);
    std::printf("%s\n", runtime::cuda::FormatGpuDecodeHeader(report).c_str());
    for (const auto& r : report.rows) print(r);
    if (!flags->json_out.empty()) {
      nlohmann::json j;
      j["model"] = report.model;
      j["hbm_bytes_per_s"] = report.hbm_bytes_per_s;
      j["streamed_weight_bytes"] = report.streamed_weight_bytes;
      j["kv_bytes_per_token"] = report.kv_bytes_per_token;
      for (const auto& r : report.rows)
        j["rows"].push_back({{"batch", r.batch}, {"context", r.context}, {"fits", r.fits},
                             {"note", r.note}, {"graph_step_us", r.graph_step_us},
                             {"loop_step_us", r.loop_step_us}, {"eager_step_us", r.eager_step_us},
                             {"floor_us", r.floor_us}, {"floor_over_time", r.ratio()}});
      std::ofstream(flags->json_out) << j.dump(1) << "\n";
    }
  });
}

}  // namespace pg::cli
