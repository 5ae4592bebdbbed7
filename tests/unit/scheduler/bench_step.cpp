// Scheduler cost per step: 256 running decodes over a prefix cache of ~1M pages.
// Measures NextPlan + Advance wall time (the scheduler itself has no clock; this does).
#include <fmt/format.h>

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
  std::vector<double> us;
  for (int i = 0; i < 2000; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    RunStep(s, &now, rng);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double v : us) sum += v;
  fmt::print("running {} decodes/step, cached pages {}: step (NextPlan+Advance) mean {:.1f} us, "
             "p50 {:.1f} us, p99 {:.1f} us\n",
             s.stats().num_running, s.kv().num_cached_device_pages(), sum / us.size(),
             us[us.size() / 2], us[us.size() * 99 / 100]);
  return 0;
}
