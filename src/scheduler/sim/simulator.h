// Discrete-event simulator: the real Scheduler driven by a cost model instead of a GPU,
// replaying synthetic agentic sessions (a conversation that grows every turn, with think
// time between turns while the agent waits on a tool). Simulated time only: no clocks.
#pragma once

#include <cstdint>
#include <string>

#include "scheduler/scheduler.h"

namespace pg::scheduler::sim {

// Step time = overhead + per token computed + per decode entry + per 1K tokens of context
// read by decodes + per page copied between device and host.
struct CostModel {
  double step_overhead_us = 8000;
  double us_per_token = 40;              // prefill-dominated compute
  double us_per_decode_entry = 150;
  double us_per_kilotoken_context = 20;  // attention reads of a decode, per 1024 tokens
  double us_per_page_copy = 90;          // one page over PCIe
};

struct AgenticTrace {
  int32_t num_sessions = 64;
  int32_t concurrency = 16;            // sessions alive at once (users)
  int32_t first_turn_tokens = 50000;   // +- 10%
  int32_t tokens_per_turn = 800;       // new user / tool tokens per turn, +- 50%
  int32_t min_turns = 10, max_turns = 15;
  int32_t output_tokens = 500;
  double think_time_mean_s = 5.0;      // exponential gap between a reply and the next turn
  // One-shot requests without a session id (batch jobs, other tenants) competing for KV.
  double background_requests_per_s = 0;
  int32_t background_prompt_tokens = 20000;  // +- 10%
  int32_t background_output_tokens = 200;
  uint32_t seed = 1;
};

struct SimConfig {
  SchedulerConfig scheduler;
  CostModel cost;
  AgenticTrace trace;
  bool use_sessions = true;  // pass session ids (retention applies only then)
};

struct SimResult {
  int64_t num_requests = 0;
  double sim_time_s = 0;
  double ttft_mean_ms = 0, ttft_p50_ms = 0, ttft_p99_ms = 0;
  double tpot_mean_ms = 0;
  double cache_hit_rate = 0;  // of session turns: cached prompt tokens / prompt tokens
  int64_t preemptions = 0;
  int64_t host_hit_pages = 0;
  int64_t steps = 0;
  double output_tokens_per_s = 0;
};

// Runs the trace to completion. Throws pg::Error for a config that cannot run.
SimResult RunSimulation(const SimConfig& config);

}  // namespace pg::scheduler::sim
