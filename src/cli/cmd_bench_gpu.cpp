// `peregrine bench gpu-decode`: decode time per output token of a dense model on one GPU
// through CUDA graphs, against the HBM floor measured in the same run (CUDA builds only;
// see runtime/cuda/gpu_decode_bench.h for the floor's definition).
//   peregrine bench gpu-decode --model configs/llama-3.1-8b/config.json --load-format dummy
//       --batch 1,8,32 --context 1024,32768
// `peregrine bench gpu-prefill`: prefill tokens/s and time to first token on a cached prefix
// against the FLOP floor (runtime/cuda/gpu_prefill_bench.h).
//   peregrine bench gpu-prefill --model configs/llama-3.1-8b/config.json --prompt 8192,32768
//       --chunk 8192 --ttft-prefix 50000 --ttft-new 800
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/status.h"
#include "runtime/cuda/gpu_decode_bench.h"
#include "runtime/cuda/gpu_prefill_bench.h"

namespace pg::cli {

void AddBenchGpuDecodeCommand(CLI::App& bench) {
  struct Flags {
    runtime::cuda::GpuDecodeBenchOptions o;
    std::string load_format = "dummy";
    std::string kv_dtype = "bf16";
    std::string weight_dtype = "bf16";
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
  cmd->add_option("--weight-dtype", flags->weight_dtype,
                  "projection weights: bf16 | fp8 (e4m3, per-tensor scale; dense models)")
      ->check(CLI::IsMember({"bf16", "fp8"}));
  cmd->add_option("--json", flags->json_out, "also write the results as JSON here");
  cmd->add_option("--capture-context", flags->o.capture_context,
                  "capture the decode graphs as the engine does: kv lengths up to this, one set "
                  "per default kv bucket (0: one set at each point's context)");
  cmd->add_option("--kv-buckets", flags->o.kv_buckets,
                  "with --capture-context: the kv lengths of the extra graph sets (0: none; default "
                  "the engine's)")
      ->delimiter(',');
  cmd->add_option("--skip-op", flags->o.skip_ops,
                  "measurement only: per value, a set of ops (registry names joined by '+', e.g. "
                  "RopeKvWriteAttention+Matmul) left out of an extra graph, timed beside the full step");
  cmd->add_flag("--profile", flags->o.profile,
                "per-op GPU times of one eager step per point (events behind a spin kernel)");
  cmd->callback([flags] {
    flags->o.dummy = flags->load_format == "dummy";
    flags->o.kv_dtype = flags->kv_dtype == "fp8" ? DType::kF8E4M3 : DType::kBF16;
    flags->o.weight_dtype = flags->weight_dtype == "fp8" ? DType::kF8E4M3 : DType::kBF16;
    auto print = [](const runtime::cuda::GpuDecodeBenchRow& r) {
      std::printf("%s\n", runtime::cuda::FormatGpuDecodeRow(r).c_str());
      if (!r.profile.empty())
        std::printf("%s\n", runtime::cuda::FormatGpuDecodeProfile(r).c_str());
      std::fflush(stdout);
    };
    // Rows print as they are measured (progress), then the whole table with its header.
    const runtime::cuda::GpuDecodeBenchReport report =
        runtime::cuda::RunGpuDecodeBench(flags->o, print);
    std::printf("%s\n", runtime::cuda::FormatGpuDecodeHeader(report).c_str());
    for (const auto& r : report.rows)
      std::printf("%s\n", runtime::cuda::FormatGpuDecodeRow(r).c_str());
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
                             {"weight_bytes", r.weight_bytes}, {"floor_us", r.floor_us},
                             {"floor_over_time", r.ratio()}});
      std::ofstream(flags->json_out) << j.dump(1) << "\n";
    }
  });
}

void AddBenchGpuPrefillCommand(CLI::App& bench) {
  struct Flags {
    runtime::cuda::GpuPrefillBenchOptions o;
    std::string load_format = "dummy";
    std::string json_out;
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* cmd = bench.add_subcommand(
      "gpu-prefill", "prefill tokens/s and TTFT on a cached prefix on the GPU vs the FLOP floor");
  cmd->add_option("--model", flags->o.model,
                  "config.json or folder (--load-format dummy), GGUF file or HF folder")
      ->required();
  cmd->add_option("--load-format", flags->load_format, "dummy | auto")
      ->check(CLI::IsMember({"dummy", "auto"}));
  cmd->add_option("--prompt", flags->o.prompts, "prompt lengths (tokens, one sequence each)")
      ->delimiter(',');
  cmd->add_option("--chunk", flags->o.chunks, "tokens per step (each size: a fresh runner)")
      ->delimiter(',');
  cmd->add_option("--ttft-prefix", flags->o.ttft_prefix, "cached tokens before the TTFT step (0: none)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--ttft-new", flags->o.ttft_new, "new tokens of the TTFT step (0: no TTFT)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--ttft-reps", flags->o.ttft_reps, "timed TTFT runs (median)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--prefill-prefix", flags->o.prefill_prefix,
                "prefill the TTFT prefix (default: random KV values, same bytes and FLOPs)");
  cmd->add_option("--gpu-memory-utilization", flags->o.gpu_memory_utilization,
                  "fraction of the GPU's memory the arena may take")
      ->check(CLI::Range(0.01, 1.0));
  cmd->add_option("--page-size", flags->o.page_size, "KV page size (tokens)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--json", flags->json_out, "also write the results as JSON here");
  cmd->callback([flags] {
    flags->o.dummy = flags->load_format == "dummy";
    auto print = [](const runtime::cuda::GpuPrefillBenchRow& r) {
      std::printf("%s\n", runtime::cuda::FormatGpuPrefillRow(r).c_str());
      std::fflush(stdout);
    };
    const runtime::cuda::GpuPrefillBenchReport report =
        runtime::cuda::RunGpuPrefillBench(flags->o, print);
    std::printf("%s\n", runtime::cuda::FormatGpuPrefillHeader(report).c_str());
    for (const auto& r : report.rows) print(r);
    if (!flags->json_out.empty()) {
      nlohmann::json j;
      j["model"] = report.model;
      j["gemm_flops_per_s"] = report.gemm_flops_per_s;
      j["linear_params_per_token"] = report.linear_params_per_token;
      for (const auto& r : report.rows)
        j["rows"].push_back({{"kind", r.kind}, {"chunk", r.chunk}, {"prefix", r.prefix},
                             {"tokens", r.tokens}, {"ok", r.ok}, {"note", r.note},
                             {"seconds", r.seconds}, {"flops", r.flops},
                             {"floor_seconds", r.floor_seconds}, {"step_ms", r.step_ms},
                             {"floor_over_time", r.ratio()}});
      std::ofstream(flags->json_out) << j.dump(1) << "\n";
    }
  });
}

}  // namespace pg::cli
