// peregrine_sim: the real scheduler + a cost model replaying an agentic trace; prints a table
// comparing policies (session retention, host tier). Defaults model an 8-GPU node.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "scheduler/sim/simulator.h"

using namespace pg::scheduler;

int main(int argc, char** argv) {
  CLI::App app{"Peregrine scheduler simulator (agentic sessions)"};
  sim::SimConfig base;
  base.scheduler.kv.page_size_tokens = 64;
  int64_t kv_tokens = 4'000'000;
  int64_t host_tokens = 16'000'000;
  double ttl_s = 60;
  base.scheduler.max_step_tokens = 8192;
  base.scheduler.max_running_requests = 64;
  app.add_option("--kv-tokens", kv_tokens, "device KV capacity in tokens (whole node)");
  app.add_option("--host-tokens", host_tokens, "host tier capacity in tokens");
  app.add_option("--ttl-s", ttl_s, "session retention TTL");
  app.add_option("--page", base.scheduler.kv.page_size_tokens, "tokens per page");
  app.add_option("--budget", base.scheduler.max_step_tokens, "tokens per step");
  app.add_option("--sessions", base.trace.num_sessions);
  app.add_option("--concurrency", base.trace.concurrency);
  app.add_option("--first-turn", base.trace.first_turn_tokens);
  app.add_option("--per-turn", base.trace.tokens_per_turn);
  app.add_option("--min-turns", base.trace.min_turns);
  app.add_option("--max-turns", base.trace.max_turns);
  app.add_option("--output", base.trace.output_tokens);
  app.add_option("--think-s", base.trace.think_time_mean_s);
  app.add_option("--background-rps", base.trace.background_requests_per_s);
  app.add_option("--background-prompt", base.trace.background_prompt_tokens);
  app.add_option("--seed", base.trace.seed);
  CLI11_PARSE(app, argc, argv);
  const int32_t page = base.scheduler.kv.page_size_tokens;
  base.scheduler.kv.num_device_pages = static_cast<int32_t>(kv_tokens / page);
  base.scheduler.max_running_requests = std::max(base.scheduler.max_running_requests, base.trace.concurrency);

  struct Policy { const char* name; bool retention; bool host; };
  const Policy policies[] = {{"LRU", false, false}, {"LRU + session TTL", true, false},
                             {"LRU + host tier", false, true}, {"TTL + host tier", true, true}};
  fmt::print("sessions {} concurrency {} first turn {} +{}/turn turns {}-{} output {} think {}s "
             "background {}/s x {} | KV {} tokens, host {} tokens, page {}, budget {}, TTL {}s\n",
             base.trace.num_sessions, base.trace.concurrency, base.trace.first_turn_tokens,
             base.trace.tokens_per_turn, base.trace.min_turns, base.trace.max_turns,
             base.trace.output_tokens, base.trace.think_time_mean_s,
             base.trace.background_requests_per_s, base.trace.background_prompt_tokens, kv_tokens,
             host_tokens, page, base.scheduler.max_step_tokens, ttl_s);
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
  return 0;
}
