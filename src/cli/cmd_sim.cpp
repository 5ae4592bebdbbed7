// `peregrine sim`: the real scheduler + a cost model replaying an agentic trace; prints a
// table comparing policies (plain LRU, session retention, host tier). Defaults model an 8-GPU
// node; the cost model and the trace generator live in src/scheduler/sim/.
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "cli/commands.h"
#include "scheduler/sim/simulator.h"

namespace pg::cli {
namespace {

using namespace pg::scheduler;

struct SimFlags {
  sim::SimConfig base;
  int64_t kv_tokens = 4'000'000;
  int64_t host_tokens = 16'000'000;
  double ttl_s = 60;
};

void RunSim(SimFlags& f) {
  sim::SimConfig& base = f.base;
  const int64_t kv_tokens = f.kv_tokens, host_tokens = f.host_tokens;
  const double ttl_s = f.ttl_s;
  const int32_t page = base.scheduler.kv.page_size_tokens;
  base.scheduler.kv.num_device_pages = static_cast<int32_t>(kv_tokens / page);
  base.scheduler.max_running_requests = std::max(base.scheduler.max_running_requests, base.trace.concurrency);

  struct Policy { const char* name; bool retention; bool host; };
  const Policy policies[] = {{"LRU", false, false}, {"LRU + session TTL", true, false},
                             {"LRU + host tier", false, true}, {"TTL + host tier", true, true}};
  fmt::print("sessions {} concurrency {} first turn {} +{}/turn turns {}-{} output {} think {}s "
             "background {}/s x {} | KV {} tokens, host {} tokens, page {}, budget {}, chunk {}, TTL {}s\n",
             base.trace.num_sessions, base.trace.concurrency, base.trace.first_turn_tokens,
             base.trace.tokens_per_turn, base.trace.min_turns, base.trace.max_turns,
             base.trace.output_tokens, base.trace.think_time_mean_s,
             base.trace.background_requests_per_s, base.trace.background_prompt_tokens, kv_tokens,
             host_tokens, page, base.scheduler.max_step_tokens,
             base.scheduler.max_prefill_chunk_tokens, ttl_s);
  fmt::print("| policy | hit rate | TTFT mean ms | TTFT p50 ms | TTFT p99 ms | TPOT ms | "
             "preemptions | host hit pages | out tok/s | turns |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Policy& p : policies) {
    sim::SimConfig c = base;
    c.scheduler.session_ttl_us = p.retention ? static_cast<int64_t>(ttl_s * 1e6) : 0;
    c.scheduler.kv.num_host_pages = p.host ? static_cast<int32_t>(host_tokens / page) : 0;
    const sim::SimResult r = sim::RunSimulation(c);
    fmt::print("| {} | {:.3f} | {:.0f} | {:.0f} | {:.0f} | {:.1f} | {} | {} | {:.0f} | {} |\n", p.name,
               r.cache_hit_rate, r.ttft_mean_ms, r.ttft_p50_ms, r.ttft_p99_ms, r.tpot_mean_ms,
               r.preemptions, r.host_hit_pages, r.output_tokens_per_s, r.num_requests);
    std::fflush(stdout);
  }
}

}  // namespace

void AddSimCommand(CLI::App& app) {
  auto f = std::make_shared<SimFlags>();
  CLI::App* cmd = app.add_subcommand("sim", "scheduler simulator: agentic sessions, policy comparison");
  sim::SimConfig& base = f->base;
  base.scheduler.kv.page_size_tokens = 64;
  base.scheduler.max_step_tokens = 8192;
  base.scheduler.max_running_requests = 64;
  cmd->add_option("--kv-tokens", f->kv_tokens, "device KV capacity in tokens (whole node)");
  cmd->add_option("--host-tokens", f->host_tokens, "host tier capacity in tokens");
  cmd->add_option("--ttl-s", f->ttl_s, "session retention TTL");
  cmd->add_option("--page", base.scheduler.kv.page_size_tokens, "tokens per page");
  cmd->add_option("--budget", base.scheduler.max_step_tokens, "tokens per step");
  cmd->add_option("--max-prefill-chunk", base.scheduler.max_prefill_chunk_tokens,
                  "prefill tokens per request per step (0: the step budget only)");
  cmd->add_option("--sessions", base.trace.num_sessions);
  cmd->add_option("--concurrency", base.trace.concurrency);
  cmd->add_option("--first-turn", base.trace.first_turn_tokens);
  cmd->add_option("--per-turn", base.trace.tokens_per_turn);
  cmd->add_option("--min-turns", base.trace.min_turns);
  cmd->add_option("--max-turns", base.trace.max_turns);
  cmd->add_option("--output", base.trace.output_tokens);
  cmd->add_option("--think-s", base.trace.think_time_mean_s);
  cmd->add_option("--background-rps", base.trace.background_requests_per_s);
  cmd->add_option("--background-prompt", base.trace.background_prompt_tokens);
  cmd->add_option("--seed", base.trace.seed);
  cmd->callback([f] { RunSim(*f); });
}

}  // namespace pg::cli
