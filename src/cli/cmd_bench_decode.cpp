// `peregrine bench decode`: prefill and decode tokens/s of one sequence on the CPU, measured
// as llama.cpp's llama-bench measures them (pp N: N prompt tokens from an empty context;
// tg M: M tokens decoded one at a time from an empty context), and — when --llama-bench
// names a llama-bench binary — the same tests run by llama.cpp on the same model file with
// the same threads, in the same run, with the ratios printed side by side.
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/log.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "runtime/sequence_runner.h"

namespace pg::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchFlags {
  ModelFlags model;
  int prompt_tokens = 512;
  int gen_tokens = 128;
  int repetitions = 3;
  std::string llama_bench;  // path to llama.cpp's llama-bench (optional)
  std::string llama_bench_args;  // extra arguments for it (e.g. "--repack 0")
  std::string json_out;
};

struct Stat {
  double mean = 0, sd = 0;
};
Stat Summarize(const std::vector<double>& v) {
  Stat s;
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
  s.sd = v.size() > 1 ? std::sqrt(s.sd / double(v.size() - 1)) : 0.0;
  return s;
}

// Runs llama-bench with JSON output; returns {pp t/s, tg t/s} (0 when absent).
std::array<Stat, 2> RunLlamaBench(const BenchFlags& f, const std::string& model_path, int threads) {
  std::string cmd = fmt::format("'{}' -m '{}' -t {} -p {} -n {} -r {} -o json {} 2>/dev/null",
                                f.llama_bench, model_path, threads, f.prompt_tokens, f.gen_tokens,
                                f.repetitions, f.llama_bench_args);
  PG_LOG_INFO("running: {}", cmd);
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  PG_ENSURE(pipe != nullptr, kIo, "cannot run {}", f.llama_bench);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe.get())) > 0) out.append(buf, n);
  std::array<Stat, 2> r{};
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(out);
  } catch (const std::exception& e) {
    Throw(ErrorCode::kIo, "llama-bench output is not JSON ({}): {}", e.what(), out.substr(0, 300));
  }
  for (const auto& t : j) {
    int idx = t.value("n_gen", 0) > 0 ? 1 : 0;
    r[size_t(idx)] = {t.value("avg_ts", 0.0), t.value("stddev_ts", 0.0)};
  }
  return r;
}

void RunBench(const BenchFlags& f) {
  f.model.ApplyThreads();
  const int threads = ThreadPool::Default().num_threads();
  engine::ModelBundle b = engine::LoadBundle(f.model.ToBundleOptions());
  const int vocab = b.model->config().vocab_size;
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  std::vector<int32_t> prompt(static_cast<size_t>(f.prompt_tokens));
  for (auto& t : prompt) t = tok(rng);
  runtime::SequenceRunner runner(*b.model, {.max_context = f.prompt_tokens + f.gen_tokens + 16,
                                            .prefill_chunk = 512});
  runner.Append(std::span<const int32_t>(prompt).first(std::min<size_t>(prompt.size(), 32)));  // warm-up
  std::vector<double> pp, tg;
  for (int r = 0; r < f.repetitions; ++r) {
    runner.Reset();
    auto t0 = Clock::now();
    runner.Append(prompt);
    pp.push_back(f.prompt_tokens / std::chrono::duration<double>(Clock::now() - t0).count());
    runner.Reset();
    int32_t next = prompt[0];
    auto t1 = Clock::now();
    for (int i = 0; i < f.gen_tokens; ++i) {
      std::span<float> logits = runner.Append({&next, 1});
      next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    tg.push_back(f.gen_tokens / std::chrono::duration<double>(Clock::now() - t1).count());
  }
  Stat ours_pp = Summarize(pp), ours_tg = Summarize(tg);
  std::array<Stat, 2> peer{};
  if (!f.llama_bench.empty()) peer = RunLlamaBench(f, b.path, threads);
  std::printf("\nmodel: %s (%s), %d threads, %d repetitions\n", b.name().c_str(), b.path.c_str(),
              threads, f.repetitions);
  std::printf("%-10s %22s %22s %10s\n", "test", "peregrine t/s", "llama.cpp t/s", "ratio");
  auto row = [&](const char* name, Stat o, Stat p) {
    if (p.mean > 0)
      std::printf("%-10s %14.2f ± %5.2f %14.2f ± %5.2f %9.2fx\n", name, o.mean, o.sd, p.mean, p.sd,
                  o.mean / p.mean);
    else
      std::printf("%-10s %14.2f ± %5.2f %22s %10s\n", name, o.mean, o.sd, "-", "-");
  };
  row(fmt::format("pp{}", f.prompt_tokens).c_str(), ours_pp, peer[0]);
  row(fmt::format("tg{}", f.gen_tokens).c_str(), ours_tg, peer[1]);
  if (!f.json_out.empty()) {
    nlohmann::json j = {{"model", b.path}, {"threads", threads}, {"repetitions", f.repetitions},
                        {"pp_tokens", f.prompt_tokens}, {"tg_tokens", f.gen_tokens},
                        {"peregrine", {{"pp_ts", ours_pp.mean}, {"pp_sd", ours_pp.sd},
                                       {"tg_ts", ours_tg.mean}, {"tg_sd", ours_tg.sd}}}};
    if (peer[0].mean > 0)
      j["llama_cpp"] = {{"pp_ts", peer[0].mean}, {"pp_sd", peer[0].sd}, {"tg_ts", peer[1].mean},
                        {"tg_sd", peer[1].sd}};
    FILE* fo = std::fopen(f.json_out.c_str(), "w");
    PG_ENSURE(fo != nullptr, kIo, "cannot write {}", f.json_out);
    std::string s = j.dump(2);
    std::fwrite(s.data(), 1, s.size(), fo);
    std::fclose(fo);
  }
}

}  // namespace

void AddBenchDecodeCommand(CLI::App& bench) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* cmd = bench.add_subcommand("decode", "prefill and decode tokens/s (vs llama.cpp)");
  f->model.Add(*cmd);
  cmd->add_option("-p,--prompt-tokens", f->prompt_tokens)->check(CLI::PositiveNumber);
  cmd->add_option("-n,--gen-tokens", f->gen_tokens)->check(CLI::PositiveNumber);
  cmd->add_option("-r,--repetitions", f->repetitions)->check(CLI::PositiveNumber);
  cmd->add_option("--llama-bench", f->llama_bench, "llama.cpp's llama-bench binary to run side by side");
  cmd->add_option("--llama-bench-args", f->llama_bench_args,
                  "extra llama-bench arguments (e.g. \"--repack 0\" where its AMX repacking crashes)");
  cmd->add_option("--json", f->json_out, "write the results as JSON");
  cmd->callback([f] { RunBench(*f); });
}

}  // namespace pg::cli
