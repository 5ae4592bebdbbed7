#include <algorithm>
#include <thread>

#include "cli/commands.h"
#include "core/quant.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace pg::cli {

void ModelFlags::Add(CLI::App& app) {
  app.add_option("-m,--model", model, "GGUF file, HF model folder, or 'embedded' (default)");
  app.add_option("--load-format", load_format, "auto | dummy (random weights of the config's shape)")
      ->check(CLI::IsMember({"auto", "dummy"}));
  app.add_option("--dummy-dtype", dummy_dtype, "dtype of dummy weights (bf16, f16, f32, q8_0, q4_1)");
  app.add_option("-t,--threads", threads, "CPU threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  app.add_option("--tokenizer", tokenizer,
                 "tokenizer.json to use instead of the model's (e.g. dummy weights)");
}

engine::BundleOptions ModelFlags::ToBundleOptions() const {
  engine::BundleOptions o;
  o.model = model;
  o.format = load_format == "dummy" ? models::LoadFormat::kDummy : models::LoadFormat::kAuto;
  auto dt = FromName(dummy_dtype);
  PG_ENSURE(dt.has_value() && quant::CanDequantize(*dt), kInvalidArgument,
            "--dummy-dtype '{}' is not a dtype dummy weights can be made in (f32, f16, bf16, "
            "q8_0, q4_0, q4_1, ...)",
            dummy_dtype);
  o.dummy_dtype = *dt;
  o.tokenizer_path = tokenizer;
  return o;
}

void ModelFlags::ApplyThreads() const {
  int n = threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
  ThreadPool::SetDefaultThreads(n);
}

void SamplingFlags::Add(CLI::App& app) {
  auto& p = params;
  app.add_option("--max-tokens,-n", p.max_tokens, "tokens to generate")->check(CLI::PositiveNumber);
  app.add_option("--temperature", p.temperature, "0 = greedy")->check(CLI::Range(0.0f, 100.0f));
  app.add_option("--top-p", p.top_p)->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--top-k", p.top_k)->check(CLI::NonNegativeNumber);
  app.add_option("--min-p", p.min_p)->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--repetition-penalty", p.repetition_penalty)->check(CLI::Range(0.01f, 100.0f));
  app.add_option("--presence-penalty", p.presence_penalty)->check(CLI::Range(-2.0f, 2.0f));
  app.add_option("--frequency-penalty", p.frequency_penalty)->check(CLI::Range(-2.0f, 2.0f));
  app.add_option("--seed", seed, "RNG seed (same seed, same output)")
      ->each([this](const std::string&) { has_seed = true; });
  app.add_flag("--ignore-eos", p.ignore_eos, "keep generating past end-of-sequence tokens");
}

runtime::SamplingParams SamplingFlags::ToParams() const {
  runtime::SamplingParams p = params;
  if (has_seed) p.seed = seed;
  return p;
}

}  // namespace pg::cli
