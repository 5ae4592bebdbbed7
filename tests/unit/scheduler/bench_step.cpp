// Scheduler cost per step: 256 running decodes over a prefix cache of ~1M pages.
// Measures NextPlan + Advance wall time (the scheduler itself has no clock; this does).
#include <fmt/format.h>

#include <ctime>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "scheduler/scheduler.h"

using namespace pg::scheduler;

namespace {
void RunStep(Scheduler& s, int64_t* now, std::mt19937& rng) {
  const Plan& plan = s.NextPlan(++*now);
  StepResult r;
  for (const PlanEntry& e : plan.entries) {
    if (e.num_sample) r.sampled.push_back({e.id, static_cast<int32_t>(rng() % 150000), false});
  }
  s.Advance(r, ++*now);
  s.TakeUpdates();
}
}  // namespace

int main() {
  constexpr int32_t kPage = 16, kCachedPages = 1'000'000, kRunning = 256;
  SchedulerConfig c;
  c.kv = pg::cache::KvCacheConfig{kPage, kCachedPages + 100'000, 0, true};
  c.max_step_tokens = 65536;
  c.max_running_requests = kRunning;
  Scheduler s(c);
  std::mt19937 rng(1);
  int64_t now = 0;
  RequestId id = 1;
  // Fill the prefix cache: one-token requests over 64K-token prompts, ~1M full pages.
  for (int i = 0; i < kCachedPages / 4096 + 1; ++i) {
    std::vector<int32_t> prompt(4096 * kPage);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % 150000);
    s.Submit(id++, SubmitParams{std::move(prompt), 1, "", 0});
  }
  while (s.HasWork()) RunStep(s, &now, rng);
  fmt::print("prefix cache: {} cached pages\n", s.kv().num_cached_device_pages());
  for (int i = 0; i < kRunning; ++i) {
    std::vector<int32_t> prompt(2000);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % 150000);
    s.Submit(id++, SubmitParams{std::move(prompt), 100000, "", 0});
  }
  while (s.stats().num_running < kRunning || s.stats().num_waiting > 0) RunStep(s, &now, rng);
  for (int i = 0; i < 200; ++i) RunStep(s, &now, rng);  // warm up
  // Wall time, and this thread's CPU time: on a shared machine a step can be descheduled for
  // a whole time slice (~8 ms), which the CPU-time figure excludes.
  auto cpu_us = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) / 1e3;
  };
  std::vector<double> us, cpu;
  for (int i = 0; i < 2000; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_us();
    RunStep(s, &now, rng);
    cpu.push_back(cpu_us() - c0);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(cpu.begin(), cpu.end());
  double cpu_sum = 0;
  for (double v : cpu) cpu_sum += v;
  fmt::print("thread CPU time per step: mean {:.1f} us, p50 {:.1f} us, p99 {:.1f} us, max {:.1f} us\n",
             cpu_sum / double(cpu.size()), cpu[cpu.size() / 2], cpu[cpu.size() * 99 / 100], cpu.back());
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double v : us) sum += v;
  fmt::print("running {} decodes/step, cached pages {}: step (NextPlan+Advance) mean {:.1f} us, "
             "p50 {:.1f} us, p99 {:.1f} us\n",
             s.stats().num_running, s.kv().num_cached_device_pages(), sum / us.size(),
             us[us.size() / 2], us[us.size() * 99 / 100]);
  return 0;
}
