#include "scheduler/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <random>
#include <unordered_map>
#include <vector>

namespace pg::scheduler::sim {
namespace {

struct Session {
  std::mt19937_64 rng;                // per session: the trace does not depend on timing
  std::vector<int32_t> conversation;  // everything said so far (prompts + replies)
  int32_t turns_left = 0;
  int32_t idx = 0;
};

struct Turn {  // one request in flight
  int32_t session = 0;  // -1: background one-shot request
  double submit_us = 0;
  double first_token_us = -1;
  double last_token_us = 0;
  int32_t num_tokens = 0;
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

}  // namespace

SimResult RunSimulation(const SimConfig& config) {
  const AgenticTrace& tr = config.trace;
  PG_ENSURE(tr.num_sessions > 0 && tr.concurrency > 0 && tr.min_turns > 0 &&
                tr.max_turns >= tr.min_turns && tr.output_tokens > 0,
            kInvalidArgument, "bad agentic trace config");
  Scheduler sched(config.scheduler);
  std::mt19937_64 rng(tr.seed);             // background arrivals and sampled tokens
  std::mt19937_64 start_rng(tr.seed ^ 0x5eed);  // first-session start times
  auto uniform = [](std::mt19937_64& g, double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(g);
  };
  auto random_tokens = [](std::mt19937_64& g, std::vector<int32_t>* out, int32_t n) {
    for (int32_t i = 0; i < n; ++i) out->push_back(static_cast<int32_t>(g() % 150000));
  };

  std::vector<Session> sessions(tr.num_sessions);
  // Arrivals: (time_us, session). Min-heap.
  using Arrival = std::pair<double, int32_t>;
  std::priority_queue<Arrival, std::vector<Arrival>, std::greater<>> arrivals;
  int32_t next_session = 0;
  auto start_session = [&](double at_us) {
    if (next_session >= tr.num_sessions) return;
    Session& s = sessions[next_session];
    s.idx = next_session;
    s.rng.seed(tr.seed * 1000003ULL + static_cast<uint64_t>(next_session));
    s.turns_left =
        tr.min_turns + static_cast<int32_t>(s.rng() % (tr.max_turns - tr.min_turns + 1));
    random_tokens(s.rng, &s.conversation,
                  static_cast<int32_t>(tr.first_turn_tokens * uniform(s.rng, 0.9, 1.1)));
    arrivals.push({at_us, next_session++});
  };
  for (int32_t i = 0; i < tr.concurrency; ++i) start_session(uniform(start_rng, 0, 1e6));
  auto next_background = [&](double from_us) {
    if (tr.background_requests_per_s <= 0) return;
    arrivals.push({from_us + std::exponential_distribution<double>(
                                 tr.background_requests_per_s / 1e6)(rng), -1});
  };
  next_background(0);
  int32_t sessions_done = 0;
  int64_t session_prompt_tokens = 0, session_cached_tokens = 0;

  std::unordered_map<RequestId, Turn> in_flight;
  std::vector<double> ttft_ms, tpot_ms;
  RequestId next_id = 1;
  double now = 0;
  int64_t output_tokens = 0, requests = 0;

  while (!arrivals.empty() || sched.HasWork()) {
    while (!arrivals.empty() && arrivals.top().first <= now) {
      const int32_t idx = arrivals.top().second;
      arrivals.pop();
      const RequestId id = next_id++;
      if (idx < 0) {  // background one-shot request; the stream stops with the sessions
        if (sessions_done == tr.num_sessions) continue;
        SubmitParams p;
        random_tokens(rng, &p.prompt_tokens,
                      static_cast<int32_t>(tr.background_prompt_tokens * uniform(rng, 0.9, 1.1)));
        p.max_new_tokens = tr.background_output_tokens;
        sched.Submit(id, std::move(p));
        in_flight[id] = Turn{-1, now, -1, 0, 0};
        next_background(now);
        continue;
      }
      Session& s = sessions[idx];
      SubmitParams p;
      p.prompt_tokens = s.conversation;
      p.max_new_tokens = tr.output_tokens;
      if (config.use_sessions) p.session_id = "session-" + std::to_string(s.idx);
      sched.Submit(id, std::move(p));
      in_flight[id] = Turn{s.idx, now, -1, 0, 0};
      ++requests;
    }
    if (!sched.HasWork()) {
      now = arrivals.top().first;  // idle: jump to the next arrival
      continue;
    }
    const Plan& plan = sched.NextPlan(static_cast<int64_t>(now));
    if (plan.empty()) {  // nothing fits right now (cannot happen while work is running)
      PG_CHECK(!arrivals.empty(), "simulation stalled with work pending");
      now = arrivals.top().first;
      continue;
    }
    const CostModel& c = config.cost;
    double step_us = c.step_overhead_us + c.us_per_token * plan.num_tokens +
                     c.us_per_page_copy * static_cast<double>(plan.copies.size());
    StepResult result;
    for (const PlanEntry& e : plan.entries) {
      if (e.is_decode) {
        step_us += c.us_per_decode_entry + c.us_per_kilotoken_context * e.first_position / 1024.0;
      }
      if (e.num_sample) result.sampled.push_back({e.id, static_cast<int32_t>(rng() % 150000), false});
    }
    now += step_us;
    sched.Advance(result, static_cast<int64_t>(now));
    for (const RequestUpdate& u : sched.TakeUpdates()) {
      Turn& t = in_flight.at(u.id);
      if (t.session < 0) {  // background: only its KV pressure matters
        if (u.finished) in_flight.erase(u.id);
        continue;
      }
      if (u.token) {
        if (t.first_token_us < 0) {
          t.first_token_us = now;
          ttft_ms.push_back((now - t.submit_us) / 1000.0);
        }
        t.last_token_us = now;
        ++t.num_tokens;
        ++output_tokens;
        sessions[t.session].conversation.push_back(*u.token);
      }
      if (!u.finished) continue;
      session_prompt_tokens += u.num_prompt_tokens;
      session_cached_tokens += u.num_cached_tokens;
      if (t.num_tokens > 1) {
        tpot_ms.push_back((t.last_token_us - t.first_token_us) / 1000.0 / (t.num_tokens - 1));
      }
      Session& s = sessions[t.session];
      in_flight.erase(u.id);
      if (--s.turns_left > 0) {
        random_tokens(s.rng, &s.conversation,
                      static_cast<int32_t>(tr.tokens_per_turn * uniform(s.rng, 0.5, 1.5)));
        const double think_us =
            std::exponential_distribution<double>(1.0 / (tr.think_time_mean_s * 1e6))(s.rng);
        arrivals.push({now + think_us, s.idx});
      } else {
        std::vector<int32_t>().swap(s.conversation);
        ++sessions_done;
        start_session(now);
      }
    }
  }

  SimResult r;
  const SchedulerStats st = sched.stats();
  r.num_requests = requests;
  r.sim_time_s = now / 1e6;
  double sum = 0;
  for (double v : ttft_ms) sum += v;
  r.ttft_mean_ms = ttft_ms.empty() ? 0 : sum / ttft_ms.size();
  r.ttft_p50_ms = Percentile(ttft_ms, 0.5);
  r.ttft_p99_ms = Percentile(ttft_ms, 0.99);
  sum = 0;
  for (double v : tpot_ms) sum += v;
  r.tpot_mean_ms = tpot_ms.empty() ? 0 : sum / tpot_ms.size();
  r.cache_hit_rate = session_prompt_tokens
                         ? static_cast<double>(session_cached_tokens) / session_prompt_tokens
                         : 0;
  r.preemptions = st.num_preemptions;
  r.host_hit_pages = sched.kv().stats().host_hit_pages;
  r.steps = st.num_steps;
  r.output_tokens_per_s = r.sim_time_s > 0 ? output_tokens / r.sim_time_s : 0;
  return r;
}

}  // namespace pg::scheduler::sim
